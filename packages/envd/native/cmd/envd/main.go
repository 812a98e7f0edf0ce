// envd: the daemon inside every aenv sandbox, in Go, speaking E2B's envd wire format so the
// e2b SDKs work unmodified. Static and small for density: ~1-2 MiB of every sandbox's image
// and memory (a Node daemon measured ~13 MiB more; docs/benchmarks.md). This file reads the
// flags and wires the parts (internal/...) together; the parts do the work.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"aenv/envd/internal/buildsteps"
	"aenv/envd/internal/filesystem"
	"aenv/envd/internal/process"
	"aenv/envd/internal/server"
	"aenv/envd/internal/state"
	"aenv/envd/internal/sudo"
	"aenv/envd/internal/users"
)

func main() {
	// The same binary is the sudo service's exec helper and runs template build steps.
	if len(os.Args) > 1 && os.Args[1] == sudo.ExecFlag {
		os.Exit(sudo.ExecMain(os.Args[2:]))
	}
	if len(os.Args) > 2 && os.Args[1] == buildsteps.Flag {
		os.Exit(buildsteps.Main(os.Args[2], os.Args[3:]))
	}
	// The port's one definition is ENVD_PORT in packages/protocol/src/index.ts: the server
	// passes it as --port to every envd it starts (runtime/envd-runtime.ts ENVD_ARGS). This
	// default, E2B's envd port, is for running envd by hand.
	port := flag.Int("port", 49983, "TCP port")
	host := flag.String("host", "0.0.0.0", "address to listen on")
	token := flag.String("access-token", "", "access token (default: none until POST /init)")
	etc := flag.String("etc", "/etc", "directory holding passwd and group")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("envd: ")
	// aenv-init offers a spawn socket this envd does not use; it must not reach commands.
	os.Unsetenv("AENV_SPAWN_SOCKET")
	if *port < 0 || *port > 65535 {
		fmt.Fprintln(os.Stderr, "invalid --port")
		os.Exit(2)
	}

	debug := os.Getenv("ENVD_DEBUG") == "1"
	st := state.New(*token)
	db := users.NewDB(*etc)
	res := &users.Resolver{DB: db, Defaults: st.Defaults}
	srv := server.New(server.Config{
		Port:      *port,
		Debug:     debug,
		State:     st,
		Accounts:  db,
		Files:     filesystem.New(filesystem.Config{Users: res, Token: st.Token, Debug: debug}),
		Processes: process.New(process.Config{Users: res, EnvVars: st.EnvVars, Debug: debug}),
	})
	if sudo.InSandbox() {
		sudo.Start(db)
		sudo.InstallLinks()
	}
	// An IPv4 host listens on IPv4 only, as Node's listen does (Go's "tcp" on 0.0.0.0 would be
	// a dual-stack IPv6 socket, whose connections show in /proc/net/tcp6 instead).
	network := "tcp"
	if ip := net.ParseIP(*host); ip != nil && ip.To4() != nil {
		network = "tcp4"
	}
	ln, err := net.Listen(network, net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		os.Exit(0)
	}()
	log.Printf("listening on %s", ln.Addr())
	if err := srv.Serve(ln); err != nil {
		log.Printf("serve: %v", err)
	}
}
