package main

// The process and filesystem messages in gen/ are generated from packages/protocol/proto (as
// the TypeScript ones are): `go generate` here, or `npm run generate -w @aenv/protocol` for
// both ends. generate_test.go fails when gen/ and the .proto files disagree.

//go:generate protoc -I ../../protocol/proto --go_out=gen --go_opt=paths=source_relative --go_opt=Mprocess/process.proto=aenv/envd/gen/process --go_opt=Mfilesystem/filesystem.proto=aenv/envd/gen/filesystem process/process.proto filesystem/filesystem.proto
