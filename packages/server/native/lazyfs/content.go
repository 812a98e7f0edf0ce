package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Content opens files of the node's content store, asking the server to fetch those that are
// not there yet (over a unix socket: the server knows the peers, the registry and its keys).
type Content struct {
	dir    string
	tree   string
	client *http.Client
	mu     sync.Mutex
	wait   map[string]chan struct{}
}

func newContent(dir, socket, tree string) *Content {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}
	return &Content{
		dir:    dir,
		tree:   tree,
		client: &http.Client{Transport: &http.Transport{DialContext: dial}, Timeout: 10 * time.Minute},
		wait:   map[string]chan struct{}{},
	}
}

func (c *Content) path(key string) string {
	return filepath.Join(c.dir, key[:2], key)
}

func (c *Content) open(key string) (int, error) {
	if fd, err := syscall.Open(c.path(key), syscall.O_RDONLY|syscall.O_NOFOLLOW, 0); err == nil {
		return fd, nil
	}
	if err := c.fetch(key); err != nil {
		return -1, err
	}
	return syscall.Open(c.path(key), syscall.O_RDONLY|syscall.O_NOFOLLOW, 0)
}

// fetch asks once per key; other openers of the same key wait for that answer.
func (c *Content) fetch(key string) error {
	c.mu.Lock()
	ch, running := c.wait[key]
	if !running {
		ch = make(chan struct{})
		c.wait[key] = ch
	}
	c.mu.Unlock()
	if running {
		<-ch
		if _, err := os.Lstat(c.path(key)); err != nil {
			return fmt.Errorf("content %s not fetched", key[:12])
		}
		return nil
	}
	defer func() {
		c.mu.Lock()
		delete(c.wait, key)
		c.mu.Unlock()
		close(ch)
	}()
	res, err := c.client.Post("http://lazyfs/fetch?tree="+url.QueryEscape(c.tree)+"&key="+url.QueryEscape(key), "text/plain", nil)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("server answered %d: %s", res.StatusCode, msg)
	}
	return nil
}
