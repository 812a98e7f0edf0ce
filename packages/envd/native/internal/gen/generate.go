// Package gen holds the process and filesystem messages generated from
// packages/protocol/proto (as the TypeScript ones are): `go generate ./...` in
// packages/envd/native, or `npm run generate -w @aenv/protocol` for both ends.
// generate_test.go fails when these files and the .proto files disagree.
package gen

//go:generate protoc -I ../../../../protocol/proto --go_out=. --go_opt=paths=source_relative --go_opt=Mprocess/process.proto=aenv/envd/internal/gen/process --go_opt=Mfilesystem/filesystem.proto=aenv/envd/internal/gen/filesystem process/process.proto filesystem/filesystem.proto
