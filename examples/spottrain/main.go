// Command spottrain is an example training job that survives spot
// reclaims. It runs a number of training steps, writes a checkpoint to its
// working directory (the instance's first volume) every few steps, and
// polls the instance metadata endpoint for a spot instance-action: when a
// reclaim is announced it checkpoints at once, and keeps checkpointing
// every step until SIGTERM arrives at the deadline, so that a relaunch of
// its persistent spot request resumes where it left off. When every step
// is done it writes a final checkpoint and exits 0, which completes the
// request.
//
//	gpucloud spot requests create --offering h100.mig.1g.10gb --persistent \
//	    --volume vol-ckpt -- spottrain --steps 1000 --step-time 1s --checkpoint-every 50
//
// It appends one line per finished step to progress.log ("<step>
// <instance-id>"), which is how the end-to-end test checks that no step was
// lost beyond one checkpoint interval per reclaim.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// checkpoint is what survives a reclaim.
type checkpoint struct {
	Step int    `json:"step"`
	By   string `json:"by"`
	Done bool   `json:"done,omitempty"`
}

func main() {
	steps := flag.Int("steps", 100, "training steps to run in all")
	stepTime := flag.Duration("step-time", 100*time.Millisecond, "time one step takes")
	every := flag.Int("checkpoint-every", 10, "checkpoint every N steps")
	poll := flag.Duration("poll", 50*time.Millisecond, "how often to poll the metadata endpoint for a reclaim notice")
	dir := flag.String("dir", ".", "where checkpoint.json and progress.log live (the volume)")
	flag.Parse()
	if err := run(*steps, *stepTime, *every, *poll, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "spottrain:", err)
		os.Exit(1)
	}
}

func run(steps int, stepTime time.Duration, every int, poll time.Duration, dir string) error {
	if steps <= 0 || every <= 0 || stepTime < 0 {
		return fmt.Errorf("--steps and --checkpoint-every must be positive")
	}
	id := os.Getenv("GPUCLOUD_INSTANCE_ID")
	ck, err := load(filepath.Join(dir, "checkpoint.json"))
	if err != nil {
		return err
	}
	if ck.Done {
		fmt.Printf("already done: %d steps\n", ck.Step)
		return nil
	}
	fmt.Printf("instance %s resumes at step %d of %d\n", id, ck.Step, steps)
	progress, err := os.OpenFile(filepath.Join(dir, "progress.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	defer progress.Close()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var noticed atomic.Bool
	if url := os.Getenv("GPUCLOUD_METADATA_URL"); url != "" {
		go watch(ctx, url, poll, &noticed)
	}
	save := func(step int, done bool) error {
		return store(filepath.Join(dir, "checkpoint.json"), checkpoint{Step: step, By: id, Done: done})
	}
	announced := false
	for step := ck.Step; step < steps; {
		select {
		case <-ctx.Done():
			// SIGTERM at the reclaim deadline: the last checkpoint is at
			// most one step old; save this one too and go.
			if err := save(step, false); err != nil {
				return err
			}
			fmt.Printf("SIGTERM: checkpointed step %d, exiting\n", step)
			return nil
		case <-time.After(stepTime):
		}
		step++
		if _, err := fmt.Fprintf(progress, "%d %s\n", step, id); err != nil {
			return err
		}
		n := noticed.Load()
		if n && !announced {
			announced = true
			fmt.Printf("reclaim notice: checkpointing every step from step %d\n", step)
		}
		if n || step%every == 0 {
			if err := save(step, false); err != nil {
				return err
			}
		}
		if step == steps {
			if err := save(step, true); err != nil {
				return err
			}
			fmt.Printf("done: %d steps\n", step)
		}
	}
	return nil
}

// watch polls the instance-action until one appears. Every request to the
// metadata endpoint carries a session token (X-Metadata-Token), got with a
// PUT to /v1/token; a 401 means it expired or the agent restarted, and a
// new one is fetched.
func watch(ctx context.Context, base string, every time.Duration, noticed *atomic.Bool) {
	hc := &http.Client{Timeout: 2 * time.Second}
	token := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		if token == "" {
			var err error
			if token, err = metadataToken(ctx, hc, base); err != nil {
				continue
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/spot/instance-action", nil)
		if err != nil {
			continue
		}
		req.Header.Set("X-Metadata-Token", token)
		resp, err := hc.Do(req)
		if err != nil {
			continue
		}
		if resp.StatusCode == http.StatusUnauthorized {
			token = ""
		}
		var a struct {
			Action string    `json:"action"`
			Time   time.Time `json:"time"`
		}
		ok := resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&a) == nil && a.Action != ""
		resp.Body.Close()
		if ok {
			if !noticed.Swap(true) {
				fmt.Printf("instance-action %s at %s\n", a.Action, a.Time.Format(time.RFC3339))
			}
			return
		}
	}
}

// metadataToken asks the metadata endpoint for a session token valid for
// an hour.
func metadataToken(ctx context.Context, hc *http.Client, base string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/v1/token", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("X-Metadata-Token-TTL-Seconds", "3600")
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("metadata token: %s", resp.Status)
	}
	return strings.TrimSpace(string(b)), nil
}

func load(path string) (checkpoint, error) {
	var ck checkpoint
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return ck, nil
	}
	if err != nil {
		return ck, err
	}
	if err := json.Unmarshal(b, &ck); err != nil {
		return ck, fmt.Errorf("%s: %w", path, err)
	}
	return ck, nil
}

// store writes the checkpoint atomically: a reclaim in the middle of a
// write leaves the previous one.
func store(path string, ck checkpoint) error {
	b, _ := json.Marshal(ck)
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
