package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestUpRestartResumes: Ctrl-C stops `gpucloud up` cleanly, and its
// running instance is stopped by the shutdown, not lost; the next `up` on
// the same data directory starts it again, with the same ID and private
// address, and the events say why.
func TestUpRestartResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cloud")
	}
	data := filepath.Join(t.TempDir(), "data")
	flags := append(append([]string{}, noMetrics...), "--data-dir", data)
	cli := func(out string, args ...string) string {
		t.Helper()
		cm := regexp.MustCompile(`CLI configured in (\S+); try:`).FindStringSubmatch(out)
		if cm == nil {
			t.Fatalf("no CLI configuration in the output:\n%s", out)
		}
		c := exec.Command(os.Args[0], args...)
		c.Env = append(os.Environ(), runMainEnv+"=1", "GPUCLOUD_CONFIG="+cm[1])
		b, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("gpucloud %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	get := func(out, id string) map[string]any {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal([]byte(cli(out, "instances", "describe", id, "-o", "json")), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}

	cmd, out, wait := startUp(t, flags...)
	var created map[string]any
	if err := json.Unmarshal([]byte(cli(out, "instances", "create", "--offering", "l40s.1x", "--wait", "-o", "json", "--", "sleep", "3600")), &created); err != nil {
		t.Fatal(err)
	}
	id, addr := created["id"].(string), created["private_address"].(string)
	if created["state"] != "running" || addr == "" {
		t.Fatalf("created: %v", created)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err, rest := wait(); err != nil {
		t.Fatalf("up after Ctrl-C: %v\n%s", err, rest)
	}
	if _, err := os.Stat(filepath.Join(data, "resume.json")); err != nil {
		t.Fatalf("no resume list after the shutdown: %v", err)
	}

	_, out, _ = startUp(t, flags...)
	deadline := time.Now().Add(time.Minute)
	if !strings.Contains(out, "started again 1 of the 1 instances the last shutdown stopped") {
		t.Fatalf("the second up does not say it started the instance again:\n%s", out)
	}
	var got map[string]any
	for {
		got = get(out, id)
		if got["state"] == "running" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got["state"] != "running" || got["private_address"] != addr {
		t.Fatalf("after the restart: state %v, address %v (was %s)", got["state"], got["private_address"], addr)
	}
	if ev := cli(out, "instances", "describe", id); !strings.Contains(ev, "gpucloud up shut down") || strings.Contains(ev, " lost ") {
		t.Fatalf("the events do not say the shutdown stopped it:\n%s", ev)
	}
	if _, err := os.Stat(filepath.Join(data, "resume.json")); !os.IsNotExist(err) {
		t.Fatalf("the resume list is still there: %v", err)
	}
}
