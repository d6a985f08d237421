package upcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/controlplane"
	"github.com/gpucloud/gpucloud/service"
)

// A clean shutdown of up is not a host failure. Ctrl-C stops every
// host's workloads, then records each host's shutdown with the server
// (service.Agents.ShutDown: the instances stop and release their hosts,
// with the reason and an event), and keeps the IDs of the instances that
// were to run in the data directory; the next up starts them again (same
// IDs, volumes and private addresses), and says so.

// resumeFile is where up keeps, between a shutdown and the next start,
// the instances its shutdown stopped.
const resumeFile = "resume.json"

// shutdownReason is the reason the instances stopped by up's shutdown
// carry.
const shutdownReason = "gpucloud up shut down; the next gpucloud up starts it again"

// resumeList is resumeFile's content.
type resumeList struct {
	Instances []string  `json:"instances"`
	At        time.Time `json:"at"`
}

// recordShutdown records every host's clean shutdown with the server and
// adds the instances it stopped to the data directory's resume list.
// Failures are logged: the instances then stay as the server had them,
// and the heartbeat watcher finds the hosts silent.
func recordShutdown(dir string, s *controlplane.Replica, hosts []*hostAgent, log *slog.Logger) {
	shut, cancel := cmdutil.ShutdownContext(10 * time.Second)
	defer cancel()
	list := readResume(dir, log)
	for _, h := range hosts {
		ids, err := s.Services.Agents.ShutDown(shut, service.AgentActor(h.id), shutdownReason)
		if err != nil {
			log.Error("up: record the host's shutdown", "host", h.id, "err", err)
			continue
		}
		// The next up's runtime must not adopt the stopped workloads
		// as exited ones: it starts them anew.
		for _, id := range ids {
			if err := h.rt.Remove(id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				log.Warn("up: forget a stopped workload", "instance", id, "err", err)
			}
		}
		list.Instances = append(list.Instances, ids...)
	}
	if len(list.Instances) == 0 {
		return
	}
	list.At = time.Now().UTC()
	b, err := json.Marshal(list)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, resumeFile), b, 0o600)
	}
	if err != nil {
		log.Error("up: keep the instances to start again", "err", err)
	}
}

// readResume reads the resume list (empty when there is none, or it
// cannot be read: said in the log).
func readResume(dir string, log *slog.Logger) resumeList {
	var list resumeList
	b, err := os.ReadFile(filepath.Join(dir, resumeFile))
	if errors.Is(err, os.ErrNotExist) {
		return list
	}
	if err == nil {
		err = json.Unmarshal(b, &list)
	}
	if err != nil {
		log.Error("up: read the instances to start again", "file", filepath.Join(dir, resumeFile), "err", err)
	}
	return list
}

// resumeInstances starts again the instances the last shutdown stopped,
// as their tenant would (the admin's start: same IDs, volumes and
// addresses; the scheduler places them anew), says how many, and drops
// the list. An instance that cannot start (terminated since, or its
// tenant's quota) is said and left as it is.
func resumeInstances(ctx context.Context, dir string, admin *client.Client, out io.Writer, log *slog.Logger) {
	list := readResume(dir, log)
	if len(list.Instances) == 0 {
		return
	}
	started := 0
	for _, id := range list.Instances {
		if _, err := admin.StartInstance(ctx, id, 0); err != nil {
			log.Warn("up: an instance the last shutdown stopped does not start again", "instance", id, "err", err)
			continue
		}
		started++
	}
	fmt.Fprintf(out, "started again %d of the %d instances the last shutdown stopped\n", started, len(list.Instances))
	if err := os.Remove(filepath.Join(dir, resumeFile)); err != nil {
		log.Error("up: drop the list of instances to start again", "err", err)
	}
}
