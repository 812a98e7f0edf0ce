package main

import (
	"context"
	"path"
	"sort"
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
	// t is the tree it lists from; nil for folders made in the mount (Mkdir), which list only
	// what was made in them.
	t *tree
	i int32
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

// tree answers lookups and listings from the index: inodes exist only for what the kernel
// asked for and keeps (it forgets them under memory pressure), so a mount costs the index
// and the inodes in use, not an inode for every path of the image.
type tree struct {
	idx     *Index
	content *Content
	// children[i] lists the entries of folder i by name; nil for anything else.
	children [][]int32
}

func newTree(idx *Index, content *Content) *tree {
	t := &tree{idx: idx, content: content, children: make([][]int32, len(idx.Entries))}
	dirs := map[string]int32{}
	for i := range idx.Entries {
		e := &idx.Entries[i]
		if e.Path != "" {
			parent := ""
			if j := strings.LastIndexByte(e.Path, '/'); j >= 0 {
				parent = e.Path[:j]
			}
			p := dirs[parent]
			t.children[p] = append(t.children[p], int32(i))
		}
		if e.Type == "d" {
			dirs[e.Path] = int32(i)
		}
	}
	for _, c := range t.children {
		sort.Slice(c, func(a, b int) bool { return t.name(c[a]) < t.name(c[b]) })
	}
	return t
}

func (t *tree) name(i int32) string {
	return path.Base(t.idx.Entries[i].Path)
}

// node makes the inode of entry i; its number is fixed by the entry, so a path asked again
// while the kernel still holds it gets the same inode.
func (t *tree) node(ctx context.Context, parent *fs.Inode, i int32, out *fuse.Attr) *fs.Inode {
	e := &t.idx.Entries[i]
	stable := fs.StableAttr{Ino: uint64(i) + 2}
	var ops fs.InodeEmbedder
	switch e.Type {
	case "d":
		stable.Mode = syscall.S_IFDIR
		ops = &dirNode{e: e, t: t, i: i}
		attrs(e, syscall.S_IFDIR, out)
	case "l":
		stable.Mode = syscall.S_IFLNK
		ops = &linkNode{e: e}
		attrs(e, syscall.S_IFLNK, out)
		out.Size = uint64(len(e.Link))
	default:
		stable.Mode = syscall.S_IFREG
		ops = &fileNode{e: e, content: t.content}
		attrs(e, syscall.S_IFREG, out)
	}
	return parent.NewInode(ctx, ops, stable)
}

// Lookup finds a name among what was made in this folder (mount points), then in the index.
func (n *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if ch := n.GetChild(name); ch != nil {
		if ga, ok := ch.Operations().(fs.NodeGetattrer); ok {
			var a fuse.AttrOut
			ga.Getattr(ctx, nil, &a)
			out.Attr = a.Attr
		}
		return ch, 0
	}
	if n.t == nil {
		return nil, syscall.ENOENT
	}
	c := n.t.children[n.i]
	k := sort.Search(len(c), func(j int) bool { return n.t.name(c[j]) >= name })
	if k == len(c) || n.t.name(c[k]) != name {
		return nil, syscall.ENOENT
	}
	return n.t.node(ctx, n.EmbeddedInode(), c[k], &out.Attr), 0
}

// Readdir lists the folder's entries in the index and what was made in it.
func (n *dirNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	var list []fuse.DirEntry
	listed := map[string]bool{}
	if n.t != nil {
		for _, i := range n.t.children[n.i] {
			name := n.t.name(i)
			mode := uint32(syscall.S_IFREG)
			switch n.t.idx.Entries[i].Type {
			case "d":
				mode = syscall.S_IFDIR
			case "l":
				mode = syscall.S_IFLNK
			}
			listed[name] = true
			list = append(list, fuse.DirEntry{Name: name, Mode: mode, Ino: uint64(i) + 2})
		}
	}
	for name, ch := range n.Children() {
		if !listed[name] {
			list = append(list, fuse.DirEntry{Name: name, Mode: ch.Mode(), Ino: ch.StableAttr().Ino})
		}
	}
	return fs.NewListDirStream(list), 0
}

// root is the tree's top folder.
type root struct {
	dirNode
}

func newRoot(idx *Index, content *Content) *root {
	t := newTree(idx, content)
	r := &root{dirNode{t: t}}
	for i := range idx.Entries {
		if idx.Entries[i].Path == "" {
			r.e = &idx.Entries[i]
			r.i = int32(i)
			break
		}
	}
	return r
}

var (
	_ = (fs.NodeLookuper)((*dirNode)(nil))
	_ = (fs.NodeReaddirer)((*dirNode)(nil))
	_ = (fs.NodeGetattrer)((*dirNode)(nil))
	_ = (fs.NodeMkdirer)((*dirNode)(nil))
	_ = (fs.NodeCreater)((*dirNode)(nil))
	_ = (fs.NodeReadlinker)((*linkNode)(nil))
	_ = (fs.NodeOpener)((*fileNode)(nil))
	_ = (fs.NodeReader)((*fileNode)(nil))
)
