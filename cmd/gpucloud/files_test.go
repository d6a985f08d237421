package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestUpCopyContainers: on `up` with containers, `volumes cp` and
// `instances cp` move files in and out of a running container and its
// volume, through the server and the host's agent, and with --direct
// straight to the agent (up --direct-access): what they create
// belongs to the workload's own uid, the SHA-256 matches what the
// workload reads, and links the workload planted resolve inside the
// container, never to the host's files.
// Containers as TestUpContainers needs them (CI fails without them).
func TestUpCopyContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cloud")
	}
	needContainers(t)
	up, out, wait := startUp(t, "--runtime", "containerd", "--agent-metrics-listen", "", "--direct-access")
	cli := upCLI(t, out)
	var vol, in struct{ ID string }
	if err := json.Unmarshal([]byte(cli("volumes", "create", "--name", "data", "--size-gib", "1", "-o", "json")), &vol); err != nil {
		t.Fatal(err)
	}
	js := cli("instances", "create", "--offering", "h100.1x", "--image", "gpucloud/base:1", "--volume", vol.ID, "--wait", "-o", "json", "--",
		"sh", "-c", "echo inside > /tmp/inside; ln -s /tmp/inside /tmp/abs-link; ln -s /etc/hostname /tmp/hn-link; echo uid=$(id -u); exec sleep 600")
	if err := json.Unmarshal([]byte(js), &in); err != nil {
		t.Fatalf("instances create: %v\n%s", err, js)
	}
	m := workloadUID(t, cli, in.ID)
	uid := m[1]
	exec := func(args ...string) string {
		code, so, se := cliRun(t, out, "", append([]string{"instances", "exec", in.ID, "--"}, args...)...)
		if code != 0 {
			t.Fatalf("exec %q: exit %d, %q %q", args, code, so, se)
		}
		return strings.TrimSpace(so)
	}
	dir := t.TempDir()
	data := make([]byte, 3<<20+5)
	rand.Read(data)
	sum := sha256.Sum256(data)
	local := filepath.Join(dir, "dataset.bin")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	copyOK := func(args ...string) {
		t.Helper()
		code, so, se := cliRun(t, out, "", args...)
		if code != 0 || !strings.Contains(se, "CRC-32C verified") {
			t.Fatalf("%q: exit %d, %q %q", args, code, so, se)
		}
	}
	inVolume := "/volumes/" + vol.ID + "/dataset.bin"
	copyOK("volumes", "cp", local, vol.ID+":/dataset.bin")
	copyOK("instances", "cp", local, in.ID+":/tmp/up.bin")
	for _, p := range []string{inVolume, "/tmp/up.bin"} {
		if got := exec("stat", "-c", "%u", p); got != uid {
			t.Errorf("%s owned by %s, want the workload's %s", p, got, uid)
		}
		if got := exec("sha256sum", p); !strings.HasPrefix(got, hex.EncodeToString(sum[:])) {
			t.Errorf("%s inside: %q, want %x", p, got, sum)
		}
	}
	back := filepath.Join(dir, "back.bin")
	copyOK("instances", "cp", in.ID+":"+inVolume, back)
	if b, _ := os.ReadFile(back); sha256.Sum256(b) != sum {
		t.Errorf("copied back out: %d bytes differ", len(b))
	}
	// Straight to the host's agent (up --direct-access): the same owner
	// and bytes, and no word of falling back to the server.
	direct := func(args ...string) {
		t.Helper()
		code, so, se := cliRun(t, out, "", append([]string{args[0], "cp", "--direct"}, args[1:]...)...)
		if code != 0 || !strings.Contains(se, "CRC-32C verified") || strings.Contains(se, "no direct copy") {
			t.Fatalf("%q --direct: exit %d, %q %q", args, code, so, se)
		}
	}
	direct("volumes", local, vol.ID+":/direct.bin")
	if got := exec("stat", "-c", "%u", "/volumes/"+vol.ID+"/direct.bin"); got != uid {
		t.Errorf("a direct copy's file owned by %s, want the workload's %s", got, uid)
	}
	direct("instances", in.ID+":/volumes/"+vol.ID+"/direct.bin", filepath.Join(dir, "direct-back.bin"))
	if b, _ := os.ReadFile(filepath.Join(dir, "direct-back.bin")); sha256.Sum256(b) != sum {
		t.Errorf("copied in and out directly: %d bytes differ", len(b))
	}
	// A direct port forward reaches a server inside the container.
	exec("sh", "-c", "mkdir -p /tmp/www && echo hello-direct > /tmp/www/index.html && httpd -p 8081 -h /tmp/www")
	addr, stderr := startPortForward(t, out, "--direct", in.ID, "0:8081")
	getThrough(t, addr, "hello-direct", 2)
	if se := stderr(); strings.Contains(se, "no direct forward") {
		t.Errorf("port-forward --direct fell back: %q", se)
	}
	// Links the workload planted resolve inside the container: an
	// absolute one to its own file, and one to /etc/hostname, which the
	// image lacks and the host has, to nothing.
	abs := filepath.Join(dir, "abs")
	copyOK("instances", "cp", in.ID+":/tmp/abs-link", abs)
	if b, _ := os.ReadFile(abs); string(b) != "inside\n" {
		t.Errorf("the planted absolute link gave %q, not the container's file", b)
	}
	if _, err := os.Stat("/etc/hostname"); err == nil {
		code, _, se := cliRun(t, out, "", "instances", "cp", in.ID+":/tmp/hn-link", filepath.Join(dir, "hn"))
		if code == 0 || !strings.Contains(se, "not_found") {
			t.Errorf("a link to /etc/hostname: exit %d, %q: want not_found (the image has none; the host's must not show)", code, se)
		}
	}
	if err := up.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err, rest := wait(); err != nil {
		t.Errorf("after SIGINT: %v, %q", err, rest)
	}
}
