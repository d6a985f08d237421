package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// upCloud is one `gpucloud up` of TestTwoUpsSideBySide.
type upCloud struct {
	name string // "a" or "b", the body its listener serves
	id   string // the cloud's identity, in every network name it makes
	cmd  *exec.Cmd
	wait func() (error, string)
	cli  func(args ...string) string
}

// TestTwoUpsSideBySide: two `gpucloud up`s with containers on one machine
// (each its own port and data directory, as the README says) run side by
// side: each makes its networks under its own identity, each tenant's
// client reaches its own listener at the same private address (both clouds
// number their default networks alike), and stopping one removes every
// namespace, link and table of its own while the other's instances go on
// talking; then stopping the other leaves nothing of either.
func TestTwoUpsSideBySide(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two local clouds")
	}
	needContainers(t)
	clouds := []*upCloud{{name: "a"}, {name: "b"}}
	for _, c := range clouds {
		c.start(t)
	}
	if clouds[0].id == clouds[1].id {
		t.Fatalf("both clouds have the identity %s", clouds[0].id)
	}
	// Each cloud: a listener, and a client that asks it every 300 ms.
	clients := map[*upCloud]string{}
	for _, c := range clouds {
		addr, _ := c.create(t, "listener", "mkdir -p /work/www && echo hello-from-"+c.name+" > /work/www/index.html && httpd -p 7000 -h /work/www && echo serving && exec sleep 600")
		_, clients[c] = c.create(t, "client", fmt.Sprintf(`i=0; while [ $i -lt 1000 ]; do r=$(timeout 2 wget -q -O - http://%s:7000/ 2>/dev/null) || r=FAIL; echo "try $i $r"; i=$((i+1)); sleep 0.3; done; exec sleep 600`, addr))
		t.Logf("cloud %s (%s): listener at %s", c.name, c.id, addr)
	}
	for _, c := range clouds {
		c.waitLog(t, clients[c], "hello-from-"+c.name)
	}
	for _, c := range clouds {
		if logs := c.cli("instances", "logs", clients[c]); strings.Contains(logs, "hello-from-"+other(clouds, c).name) {
			t.Errorf("cloud %s's client reached the other cloud's listener:\n%s", c.name, logs)
		}
	}

	// Stop a: nothing of a's is left, and b's client goes on.
	a, b := clouds[0], clouds[1]
	before := len(tries(b.cli("instances", "logs", clients[b])))
	a.stop(t)
	if left := networkObjects(t, a.id); len(left) > 0 {
		t.Errorf("cloud a's stop left %v", left)
	}
	if len(networkObjects(t, b.id)) == 0 {
		t.Errorf("cloud a's stop removed cloud b's networks")
	}
	var after []string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		if after = tries(b.cli("instances", "logs", clients[b]))[before:]; len(after) >= 5 {
			break
		}
	}
	if len(after) < 5 {
		t.Errorf("cloud b's client tried %d times in 20 s after a's stop", len(after))
	}
	for _, l := range after {
		if !strings.HasSuffix(l, " hello-from-b") {
			t.Errorf("cloud b's client after a's stop: %q", l)
		}
	}
	b.stop(t)
	for _, c := range clouds {
		if left := networkObjects(t, c.id); len(left) > 0 {
			t.Errorf("cloud %s: left %v", c.name, left)
		}
	}
}

// other is the cloud of two that is not c.
func other(clouds []*upCloud, c *upCloud) *upCloud {
	if clouds[0] == c {
		return clouds[1]
	}
	return clouds[0]
}

// start starts the cloud's up with containers and reads its identity.
func (c *upCloud) start(t *testing.T) {
	t.Helper()
	cmd, out, wait := startUp(t, "--runtime", "containerd", "--agent-metrics-listen", "")
	c.cmd, c.wait = cmd, wait
	m := regexp.MustCompile(`hosts' fabric: cloud (\S+),`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("cloud %s: no fabric in up's output:\n%s", c.name, out)
	}
	c.id = m[1]
	c.cli = upCLI(t, out)
}

// create runs script in a container of the cloud's base image and
// returns the instance's private address and ID once it runs.
func (c *upCloud) create(t *testing.T, name, script string) (addr, id string) {
	t.Helper()
	var in struct {
		ID, State      string
		PrivateAddress string `json:"private_address"`
	}
	js := c.cli("instances", "create", "--name", name, "--offering", "h100.1x", "--image", "gpucloud/base:1", "--wait", "-o", "json", "--", "sh", "-c", script)
	if err := json.Unmarshal([]byte(js), &in); err != nil || in.State != "running" || in.PrivateAddress == "" {
		t.Fatalf("cloud %s: create %s: %v\n%s", c.name, name, err, js)
	}
	return in.PrivateAddress, in.ID
}

// waitLog waits (at most a minute) until the instance's log has want.
func (c *upCloud) waitLog(t *testing.T, id, want string) {
	t.Helper()
	var logs string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		if logs = c.cli("instances", "logs", id); strings.Contains(logs, want) {
			return
		}
	}
	t.Fatalf("cloud %s: %s's log lacks %q:\n%s", c.name, id, want, logs)
}

// stop stops the cloud's up with Ctrl-C; it must exit 0.
func (c *upCloud) stop(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err, rest := c.wait(); err != nil || !strings.Contains(rest, "gpucloud stopped") {
		t.Errorf("cloud %s after SIGINT: %v, %q", c.name, err, rest)
	}
}

// tries are the client's "try N ..." lines, in order.
func tries(logs string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.HasPrefix(l, "try ") {
			out = append(out, l)
		}
	}
	return out
}

// networkObjects lists the machine's network namespaces, links and
// nftables tables whose names carry the cloud's identity (every name the
// cloud's networks make does: gc<id>..., gpucloud_<id>...).
func networkObjects(t *testing.T, id string) []string {
	t.Helper()
	var left []string
	for _, probe := range [][]string{{"ip", "netns", "list"}, {"ip", "-o", "link", "show"}, {"nft", "list", "tables"}} {
		out, err := exec.Command(probe[0], probe[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(probe, " "), err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "gc"+id) || strings.Contains(l, "gpucloud_"+id) {
				left = append(left, strings.TrimSpace(l))
			}
		}
	}
	return left
}
