module aenv/lazyfs

go 1.19

require (
	github.com/hanwen/go-fuse/v2 v2.1.0
	golang.org/x/sys v0.3.0
)

// Debian's packages (scripts/install-deps.sh): builds download no modules.
replace (
	github.com/hanwen/go-fuse/v2 => /usr/share/gocode/src/github.com/hanwen/go-fuse
	github.com/kylelemons/godebug => /usr/share/gocode/src/github.com/kylelemons/godebug
	golang.org/x/sync => /usr/share/gocode/src/golang.org/x/sync
	golang.org/x/sys => /usr/share/gocode/src/golang.org/x/sys
)
