package sshd

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// fakeExec runs a few commands the way a shell in an instance would, so
// that the tests see what the server hands an Execer.
func fakeExec(ctx context.Context, p Process) (int, error) {
	cmd := p.Argv[len(p.Argv)-1]
	switch {
	case strings.Join(p.Argv, " ") == strings.Join(DefaultShell, " "):
		return fakeShell(ctx, p)
	case cmd == "echo hi":
		fmt.Fprintln(p.Stdout, "hi")
		return 0, nil
	case cmd == "env":
		fmt.Fprintln(p.Stdout, strings.Join(p.Env, " "))
		return 0, nil
	case cmd == "cat":
		_, err := io.Copy(p.Stdout, p.Stdin)
		return 0, err
	case cmd == "wait for a signal":
		select {
		case sig := <-p.Signals:
			fmt.Fprintln(p.Stderr, "got", sig)
			return 130, nil
		case <-ctx.Done():
			return 137, nil
		}
	case cmd == "eof?":
		// Whether stdin ends within a moment.
		got := make(chan error, 1)
		go func() { _, err := io.ReadAll(p.Stdin); got <- err }()
		select {
		case <-got:
			fmt.Fprintln(p.Stdout, "eof")
		case <-time.After(300 * time.Millisecond):
			fmt.Fprintln(p.Stdout, "no eof")
		}
		return 0, nil
	case cmd == "no such binary":
		return 0, errors.New("exec: no such file")
	case strings.HasPrefix(cmd, "exit "):
		var code int
		fmt.Sscan(strings.TrimPrefix(cmd, "exit "), &code)
		return code, nil
	}
	return 127, nil
}

// fakeShell answers each line it reads, reports resizes, and exits at
// "exit".
func fakeShell(ctx context.Context, p Process) (int, error) {
	fmt.Fprintf(p.Stdout, "tty=%v size=%dx%d env=%s\n", p.TTY, p.Size.Cols, p.Size.Rows, strings.Join(p.Env, ","))
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(p.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for {
		select {
		case sz := <-p.Resize:
			fmt.Fprintf(p.Stdout, "resized %dx%d\n", sz.Cols, sz.Rows)
		case l, ok := <-lines:
			if !ok || l == "exit" {
				return 0, nil
			}
			fmt.Fprintf(p.Stdout, "you said %s\n", l)
		case <-ctx.Done():
			return 137, nil
		}
	}
}

// echoPort listens on loopback and answers each connection with what it
// read, upper-cased, once the client half-closes.
func echoPort(t *testing.T) Dialer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				_, _ = c.Write([]byte(strings.ToUpper(string(b))))
			}()
		}
	}()
	return func(ctx context.Context, port uint16) (net.Conn, error) {
		if port != 8888 {
			return nil, fmt.Errorf("connection refused")
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	}
}

func newSigner(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// connPair is a connected pair of loopback TCP connections. (net.Pipe
// does not do: both ends of SSH write their version line before reading,
// and net.Pipe has no buffer.)
func connPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

type fixture struct {
	host, user ssh.Signer
	served     chan error
}

// dial serves one connection with the fixture's host key and user key
// authorized, and connects to it as a client with key.
func (f *fixture) dial(t *testing.T, ctx context.Context, key ssh.Signer, dial Dialer) (*ssh.Client, error) {
	t.Helper()
	cc, sc := connPair(t)
	f.served = make(chan error, 1)
	go func() {
		f.served <- Serve(ctx, sc, Config{HostKey: f.host, Authorized: []ssh.PublicKey{f.user.PublicKey()}, Exec: fakeExec, Dial: dial, Signals: true})
	}()
	conn, chans, reqs, err := ssh.NewClientConn(cc, "i-1.gpucloud", &ssh.ClientConfig{
		User:            "root",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(key)},
		HostKeyCallback: ssh.FixedHostKey(f.host.PublicKey()),
		Timeout:         10 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	c := ssh.NewClient(conn, chans, reqs)
	t.Cleanup(func() { c.Close() })
	return c, nil
}

func newFixture(t *testing.T) *fixture {
	return &fixture{host: newSigner(t), user: newSigner(t)}
}

func TestAuth(t *testing.T) {
	ctx := t.Context()
	f := newFixture(t)
	c, err := f.dial(t, ctx, f.user, nil)
	if err != nil {
		t.Fatalf("an authorized key: %v", err)
	}
	c.Close()
	if err := <-f.served; err != nil {
		t.Errorf("Serve after a clean session: %v", err)
	}
	if _, err := f.dial(t, ctx, newSigner(t), nil); err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
		t.Errorf("another key: %v, want refused", err)
	}
	if err := <-f.served; err == nil {
		t.Error("Serve of a refused client answered nil")
	}
	// No authorized keys at all: nothing gets in.
	cc, sc := connPair(t)
	go func() { _ = Serve(ctx, sc, Config{HostKey: f.host, Exec: fakeExec}) }()
	_, _, _, err = ssh.NewClientConn(cc, "x", &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(f.user)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	if err == nil {
		t.Error("a server without authorized keys let a key in")
	}
}

func TestExec(t *testing.T) {
	f := newFixture(t)
	c, err := f.dial(t, t.Context(), f.user, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cmd, stdin, out string
		code            int
	}{
		{"echo hi", "", "hi\n", 0},
		{"exit 3", "", "", 3},
		{"cat", "some bytes\x00\xff", "some bytes\x00\xff", 0},
		{"no such binary", "", "", 127},
	} {
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		s.Stdin = strings.NewReader(tc.stdin)
		out, err := s.Output(tc.cmd)
		code := 0
		var ee *ssh.ExitError
		if errors.As(err, &ee) {
			code, err = ee.ExitStatus(), nil
		}
		if err != nil || string(out) != tc.out || code != tc.code {
			t.Errorf("%s: %q, exit %d, %v; want %q, exit %d", tc.cmd, out, code, err, tc.out, tc.code)
		}
	}
	// The environment: the locale and TERM get through, nothing else.
	s, _ := c.NewSession()
	if err := s.Setenv("LANG", "C.UTF-8"); err != nil {
		t.Errorf("LANG refused: %v", err)
	}
	if err := s.Setenv("LC_ALL", "C"); err != nil {
		t.Errorf("LC_ALL refused: %v", err)
	}
	if err := s.Setenv("LD_PRELOAD", "/tmp/evil.so"); err == nil {
		t.Error("LD_PRELOAD accepted")
	}
	if out, err := s.Output("env"); err != nil || string(out) != "LANG=C.UTF-8 LC_ALL=C\n" {
		t.Errorf("env: %q, %v", out, err)
	}
	// A signal reaches the process; its status comes back.
	s, _ = c.NewSession()
	var stderr strings.Builder
	s.Stderr = &stderr
	if err := s.Start("wait for a signal"); err != nil {
		t.Fatal(err)
	}
	if err := s.Signal(ssh.SIGINT); err != nil {
		t.Fatal(err)
	}
	var ee *ssh.ExitError
	if err := s.Wait(); !errors.As(err, &ee) || ee.ExitStatus() != 130 || stderr.String() != "got INT\n" {
		t.Errorf("after SIGINT: %v, stderr %q", err, stderr.String())
	}
}

func TestShellWithPty(t *testing.T) {
	f := newFixture(t)
	c, err := f.dial(t, t.Context(), f.user, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RequestPty("xterm-256color", 40, 120, ssh.TerminalModes{ssh.ECHO: 1}); err != nil {
		t.Fatal(err)
	}
	in, _ := s.StdinPipe()
	outPipe, _ := s.StdoutPipe()
	out := bufio.NewReader(outPipe)
	if err := s.Shell(); err != nil {
		t.Fatal(err)
	}
	expect := func(want string) {
		t.Helper()
		line, err := out.ReadString('\n')
		if err != nil || line != want+"\n" {
			t.Fatalf("read %q, %v; want %q", line, err, want)
		}
	}
	expect("tty=true size=120x40 env=TERM=xterm-256color")
	fmt.Fprintln(in, "hello")
	expect("you said hello")
	if err := s.WindowChange(50, 200); err != nil {
		t.Fatal(err)
	}
	expect("resized 200x50")
	fmt.Fprintln(in, "exit")
	if err := s.Wait(); err != nil {
		t.Errorf("exit: %v", err)
	}
	// The client's EOF ends a command's input, but does not hang up a
	// terminal (ssh -tt < /dev/null), as with OpenSSH's sshd.
	for _, tty := range []bool{false, true} {
		s, _ := c.NewSession()
		if tty {
			if err := s.RequestPty("xterm", 24, 80, nil); err != nil {
				t.Fatal(err)
			}
		}
		s.Stdin = strings.NewReader("")
		out, err := s.Output("eof?")
		if want := map[bool]string{false: "eof\n", true: "no eof\n"}[tty]; err != nil || string(out) != want {
			t.Errorf("tty %v: %q, %v; want %q", tty, out, err, want)
		}
	}
	// A second shell on a session that has one is refused.
	s2, _ := c.NewSession()
	if err := s2.Start("exit 0"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s2.SendRequest("shell", true, nil); ok {
		t.Error("a second process on one session accepted")
	}
	_ = s2.Wait()
}

func TestForwarding(t *testing.T) {
	f := newFixture(t)
	c, err := f.dial(t, t.Context(), f.user, echoPort(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"localhost:8888", "127.0.0.1:8888"} {
		conn, err := c.Dial("tcp", host)
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		if _, err := conn.Write([]byte("jupyter")); err != nil {
			t.Fatal(err)
		}
		_ = conn.(interface{ CloseWrite() error }).CloseWrite()
		b, err := io.ReadAll(conn)
		if err != nil || string(b) != "JUPYTER" {
			t.Errorf("%s: read %q, %v", host, b, err)
		}
		conn.Close()
	}
	for _, host := range []string{"10.0.0.1:8888", "169.254.169.254:80", "localhost:9999"} {
		if conn, err := c.Dial("tcp", host); err == nil {
			conn.Close()
			t.Errorf("%s: forwarded", host)
		}
	}
	// Remote forwarding (ssh -R) is refused.
	if ln, err := c.Listen("tcp", "127.0.0.1:0"); err == nil {
		ln.Close()
		t.Error("remote forwarding accepted")
	}
	// Without a dialer, no forwarding.
	f2 := newFixture(t)
	c2, err := f2.dial(t, t.Context(), f2.user, nil)
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := c2.Dial("tcp", "localhost:8888"); err == nil {
		conn.Close()
		t.Error("forwarded without a dialer")
	}
}

// TestCancel: the agent's context ending (a restart) ends the connection
// and the process.
func TestCancel(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	c, err := f.dial(t, ctx, f.user, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := c.NewSession()
	if err := s.Start("wait for a signal"); err != nil {
		t.Fatal(err)
	}
	cancel()
	waited := make(chan error, 1)
	go func() { waited <- s.Wait() }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the session outlived its context")
	}
	select {
	case <-f.served:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve outlived its context")
	}
}

func TestHostKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ssh", "i-1.key")
	k1, err := HostKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if k1.PublicKey().Type() != ssh.KeyAlgoED25519 {
		t.Errorf("type %s", k1.PublicKey().Type())
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file %v, %v; want mode 0600", st.Mode(), err)
	}
	if d, _ := os.Stat(filepath.Dir(path)); d.Mode().Perm() != 0o700 {
		t.Errorf("key dir mode %v", d.Mode())
	}
	k2, err := HostKey(path)
	if err != nil || string(k2.PublicKey().Marshal()) != string(k1.PublicKey().Marshal()) {
		t.Errorf("reloaded another key: %v", err)
	}
	if err := os.WriteFile(path, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := HostKey(path); err == nil {
		t.Error("a junk key file loaded")
	}
}

func TestParseAuthorized(t *testing.T) {
	a, b := newSigner(t), newSigner(t)
	lines := []string{string(ssh.MarshalAuthorizedKey(a.PublicKey())), "", "# comment",
		strings.TrimSpace(string(ssh.MarshalAuthorizedKey(b.PublicKey()))) + " me@laptop"}
	keys, err := ParseAuthorized(lines)
	if err != nil || len(keys) != 2 {
		t.Fatalf("%d keys, %v", len(keys), err)
	}
	if _, err := ParseAuthorized([]string{"ssh-ed25519 garbage"}); err == nil || !strings.Contains(err.Error(), "key 1") {
		t.Errorf("garbage: %v", err)
	}
}
