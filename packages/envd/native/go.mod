module aenv/envd

go 1.19

require google.golang.org/protobuf v1.28.1

// Debian's golang-google-protobuf-dev (scripts/install-deps.sh): builds download no modules.
replace google.golang.org/protobuf => /usr/share/gocode/src/google.golang.org/protobuf
