package main

import (
	"context"
	"path"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// attrs fills what stat says about an entry; the tree is read-only and never changes.
func attrs(e *Entry, kind uint32, out *fuse.Attr) {
	out.Mode = kind | (e.Mode & 07777)
	out.Uid = e.UID
	out.Gid = e.GID
	out.Size = e.Size
	out.Blocks = (e.Size + 511) / 512
	out.Nlink = 1
	t := uint64(e.Mtime)
	out.Mtime, out.Atime, out.Ctime = t, t, t
	out.Blksize = 4096
}

type dirNode struct {
	fs.Inode
	e *Entry
}

func (n *dirNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	attrs(n.e, syscall.S_IFDIR, &out.Attr)
	return 0
}

// Mkdir and Create make empty folders and files that exist only in this mount: the places
// runsc mounts /proc, /dev, /etc/resolv.conf, volumes and the like at, which an image need not
// have. Nothing else is written; a sandbox's own writes go to runsc's overlay above the tree.
func (n *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	e := &Entry{Path: path.Join(n.e.Path, name), Type: "d", Mode: mode & 07777, Mtime: n.e.Mtime}
	ch := n.NewPersistentInode(ctx, &dirNode{e: e}, fs.StableAttr{Mode: syscall.S_IFDIR})
	attrs(e, syscall.S_IFDIR, &out.Attr)
	return ch, 0
}

func (n *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	e := &Entry{Path: path.Join(n.e.Path, name), Type: "f", Mode: mode & 07777, Mtime: n.e.Mtime}
	ch := n.NewPersistentInode(ctx, &fileNode{e: e}, fs.StableAttr{Mode: syscall.S_IFREG})
	attrs(e, syscall.S_IFREG, &out.Attr)
	return ch, nil, fuse.FOPEN_KEEP_CACHE, 0
}

type linkNode struct {
	fs.Inode
	e *Entry
}

func (n *linkNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	attrs(n.e, syscall.S_IFLNK, &out.Attr)
	out.Size = uint64(len(n.e.Link))
	return 0
}

func (n *linkNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	return []byte(n.e.Link), 0
}

type fileNode struct {
	fs.Inode
	e       *Entry
	content *Content
}

func (n *fileNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	attrs(n.e, syscall.S_IFREG, &out.Attr)
	return 0
}

// Open fetches the file's content on first use (once per key, whoever asks), then reads go to
// the stored entry. Its bytes never change: the kernel keeps them cached between opens.
func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC) != 0 {
		return nil, 0, syscall.EROFS
	}
	if n.e.Key == "" {
		return nil, fuse.FOPEN_KEEP_CACHE, 0
	}
	fd, err := n.content.open(n.e.Key)
	if err != nil {
		logf("open %s: %v", n.e.Path, err)
		return nil, 0, syscall.EIO
	}
	return fs.NewLoopbackFile(fd), fuse.FOPEN_KEEP_CACHE, 0
}

// Read goes to the stored entry's handle; a file without bytes has none and reads nothing.
func (n *fileNode) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if r, ok := f.(fs.FileReader); ok {
		return r.Read(ctx, dest, off)
	}
	return fuse.ReadResultData(nil), 0
}

// root builds the whole tree when mounted: lookups and listings never leave the kernel's
// cache and this process's memory.
type root struct {
	dirNode
	idx     *Index
	content *Content
}

func (r *root) OnAdd(ctx context.Context) {
	dirs := map[string]*fs.Inode{"": &r.Inode}
	for i := range r.idx.Entries {
		e := &r.idx.Entries[i]
		if e.Path == "" {
			r.e = e
			continue
		}
		parent := dirs[path.Dir(e.Path)]
		if !strings.Contains(e.Path, "/") {
			parent = dirs[""]
		}
		var ch *fs.Inode
		switch e.Type {
		case "d":
			ch = parent.NewPersistentInode(ctx, &dirNode{e: e}, fs.StableAttr{Mode: syscall.S_IFDIR})
			dirs[e.Path] = ch
		case "l":
			ch = parent.NewPersistentInode(ctx, &linkNode{e: e}, fs.StableAttr{Mode: syscall.S_IFLNK})
		default:
			ch = parent.NewPersistentInode(ctx, &fileNode{e: e, content: r.content}, fs.StableAttr{Mode: syscall.S_IFREG})
		}
		parent.AddChild(path.Base(e.Path), ch, true)
	}
}

var (
	_ = (fs.NodeOnAdder)((*root)(nil))
	_ = (fs.NodeGetattrer)((*dirNode)(nil))
	_ = (fs.NodeMkdirer)((*dirNode)(nil))
	_ = (fs.NodeCreater)((*dirNode)(nil))
	_ = (fs.NodeReadlinker)((*linkNode)(nil))
	_ = (fs.NodeOpener)((*fileNode)(nil))
	_ = (fs.NodeReader)((*fileNode)(nil))
)
