package filesystem

// Content negotiation of GET /files as E2B's envd does it (RFC 9110 §12.5.3): the best of
// identity and gzip by the client's q-values, identity when the header is absent, and no
// answer (406) only when identity is refused and gzip is not asked for.

import (
	"compress/gzip"
	"io"
	"sort"
	"strconv"
	"strings"
)

const (
	encodingIdentity = "identity"
	encodingGzip     = "gzip"
)

// acceptableEncodings is what a 406 names.
const acceptableEncodings = "[identity, gzip]"

type weighted struct {
	coding string
	q      float64
}

// parseAccept splits an Accept-Encoding value into codings with their weights (a malformed
// weight counts as 1, as a missing one does; a coding's case is not significant).
func parseAccept(header string) []weighted {
	var out []weighted
	for _, part := range strings.Split(header, ",") {
		fields := strings.Split(part, ";")
		coding := strings.ToLower(strings.TrimSpace(fields[0]))
		if coding == "" {
			continue
		}
		q := 1.0
		for _, p := range fields[1:] {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if !ok || strings.TrimSpace(strings.ToLower(k)) != "q" {
				continue
			}
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f >= 0 && f <= 1 {
				q = f
			}
		}
		out = append(out, weighted{coding, q})
	}
	return out
}

// negotiateEncoding picks the coding of a download: "identity", "gzip", or "" when none the
// client accepts is offered. Equal weights go to the first listed, so `gzip, deflate` (what
// fetch and httpx send on their own) gets gzip, as from E2B.
func negotiateEncoding(header string) string {
	if strings.TrimSpace(header) == "" {
		return encodingIdentity
	}
	codings := parseAccept(header)
	identityQ, wildcardQ := -1.0, -1.0
	for _, c := range codings {
		switch c.coding {
		case encodingIdentity:
			identityQ = c.q
		case "*":
			wildcardQ = c.q
		}
	}
	// Identity is acceptable unless refused by name, or by `*;q=0` without naming it.
	identityRefused := identityQ == 0 || (identityQ < 0 && wildcardQ == 0)
	sort.SliceStable(codings, func(i, j int) bool { return codings[i].q > codings[j].q })
	for _, c := range codings {
		if c.q == 0 {
			continue
		}
		switch c.coding {
		case encodingIdentity:
			return encodingIdentity
		case encodingGzip, "x-gzip":
			return encodingGzip
		case "*":
			if identityRefused {
				return encodingGzip
			}
			return encodingIdentity
		}
	}
	if identityRefused {
		return ""
	}
	return encodingIdentity
}

// compressSample is how much of a file is tried before its download is gzipped.
const compressSample = 64 << 10

// worthCompressing: whether gzip shrinks the file's first bytes below 90%. Already compressed
// content (archives, images, model weights, random bytes) is sent as it is: gzip would cost
// the sandbox's CPU and the client's for nothing (a 32 MiB random file took 40% longer). A
// server may always choose identity; the client cannot tell but by the header.
func worthCompressing(f io.ReaderAt, size int64) bool {
	n := size
	if n > compressSample {
		n = compressSample
	}
	buf := make([]byte, n)
	got, err := f.ReadAt(buf, 0)
	if got == 0 && err != nil {
		return true
	}
	var out countingWriter
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestSpeed)
	zw.Write(buf[:got])
	zw.Close()
	return out.n*10 < int64(got)*9
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}
