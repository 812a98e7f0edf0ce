// aenv-lazyfs serves one image tree, read-only, over FUSE: its folders, links and file
// metadata come from an index the server wrote, a file's bytes from the node's content store,
// fetched through the server when a file is first opened. runsc's gofer serves the mount as a
// template's root filesystem, so a sandbox starts before the image's content is on the node.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func logf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, time.Now().UTC().Format(time.RFC3339)+" "+format+"\n", args...)
}

func main() {
	index := flag.String("index", "", "tree index (JSON) to serve")
	content := flag.String("content", "", "content store folder (<dir>/<key[:2]>/<key>)")
	socket := flag.String("fetch", "", "unix socket of the server that fetches missing content")
	mount := flag.String("mount", "", "where to mount")
	tree := flag.String("tree", "", "the tree's name, sent with each fetch")
	flag.Parse()
	if *index == "" || *content == "" || *socket == "" || *mount == "" {
		flag.Usage()
		os.Exit(2)
	}
	idx, err := readIndex(*index)
	if err != nil {
		logf("%v", err)
		os.Exit(1)
	}
	// The tree never changes while mounted: the kernel may cache names and attributes for long.
	hour := time.Hour
	r := newRoot(idx, newContent(*content, *socket, *tree))
	// Reading the index took several times its size in garbage: given back before serving, as
	// this process may live as long as a sandbox started on the tree.
	debug.FreeOSMemory()
	server, err := fs.Mount(*mount, r, &fs.Options{
		MountOptions: fuse.MountOptions{
			AllowOther:  true,
			DirectMount: true,
			FsName:      "aenv-lazyfs",
			// The type is then fuse.aenv-lazyfs, which the server looks for (util/mounts.ts).
			Name:         "aenv-lazyfs",
			MaxReadAhead: 1 << 20,
			// The kernel checks the tree's modes for the host's other users, as it would on an
			// unpacked tree (root, and runsc's gofer, pass).
			Options: []string{"default_permissions"},
		},
		EntryTimeout:    &hour,
		AttrTimeout:     &hour,
		NegativeTimeout: &hour,
	})
	if err != nil {
		logf("mount %s: %v", *mount, err)
		os.Exit(1)
	}
	logf("serving %d entries at %s", len(idx.Entries), *mount)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		if err := server.Unmount(); err != nil {
			logf("unmount: %v", err)
		}
	}()
	server.Wait()
}
