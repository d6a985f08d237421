package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/gateway"
	"github.com/gpucloud/gpucloud/relay"
	"github.com/gpucloud/gpucloud/service"
)

// The replica registry's loop (docs/CONTROL_PLANE.md, "Several
// replicas"): every ReplicaHeartbeat, and soon after an agent's control
// channel opens or closes here, the replica writes its record
// (service.Replicas.Heartbeat: its address, the hosts whose channels it
// holds, its gateway's load) and keeps what it reads back in memory: the
// peers' routes (relay.Peers) and their load (the gateway's and the
// endpoint controller's). No request reads the registry from the store.

// registry is a replica's view of its peers, from its last heartbeat.
type registry struct {
	id, address string
	started     time.Time
	peers       *relay.Peers // nil: this replica cannot forward (plain HTTP)

	mu   sync.Mutex
	live []string                  // live replicas' IDs, this one's among them
	load []map[string]gateway.Load // the peers' gateway loads
}

// replicaAddress is the address peers reach this replica at:
// cfg.ReplicaAddress, or the listener's address, with the host's name
// in place of an unspecified address.
func replicaAddress(cfg Config, ln net.Addr) string {
	if cfg.ReplicaAddress != "" {
		return cfg.ReplicaAddress
	}
	ta, ok := ln.(*net.TCPAddr)
	if !ok {
		return ln.String()
	}
	if ta.IP.IsUnspecified() {
		if h, err := os.Hostname(); err == nil && h != "" {
			return net.JoinHostPort(h, strconv.Itoa(ta.Port))
		}
	}
	return ta.String()
}

// peerClient is the HTTP client this replica reaches its peers with:
// its replica certificate, issued by the cloud's CA at every start, and
// the peers' servers trusted by the cloud's CA (or the system's roots,
// for an operator's certificate).
func (s *Replica) peerClient(id string) (*http.Client, error) {
	cert, err := s.ca.ReplicaCert(id, time.Now())
	if err != nil {
		return nil, err
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	roots.AddCert(s.ca.Cert)
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, Certificates: []tls.Certificate{cert}},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}}, nil
}

// runRegistry writes this replica's record and reads its peers' until
// ctx ends.
func (s *Replica) runRegistry(ctx context.Context, cfg Config) {
	every, ttl := cfg.ReplicaHeartbeat, cfg.ReplicaTTL
	if every <= 0 {
		every = service.DefaultReplicaHeartbeat
	}
	if ttl <= 0 {
		ttl = service.DefaultReplicaTTL
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last time.Time
	for {
		changed := s.hub.Changed()
		if err := s.heartbeat(ctx, ttl); err != nil && ctx.Err() == nil {
			cfg.Log.Warn("replica registry: heartbeat", "err", err)
		}
		last = time.Now()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changed:
			// A channel opened or closed: write it now, but at most
			// every 100 ms however often agents come and go.
			if d := 100*time.Millisecond - time.Since(last); d > 0 {
				sleep(ctx, d)
			}
		}
	}
}

// heartbeat is one round of the registry.
func (s *Replica) heartbeat(ctx context.Context, ttl time.Duration) error {
	r := s.reg
	load, err := json.Marshal(s.Gateway.Load())
	if err != nil {
		return err
	}
	live, err := s.Services.Replicas.Heartbeat(ctx, cloud.Replica{ID: r.id, Address: r.address, StartedAt: r.started,
		Load: string(load), Hosts: s.hub.Hosts()}, ttl)
	if err != nil {
		return err
	}
	ids := make([]string, 0, len(live))
	var loads []map[string]gateway.Load
	for _, p := range live {
		ids = append(ids, p.ID)
		if p.ID == r.id || p.Load == "" {
			continue
		}
		var l map[string]gateway.Load
		if json.Unmarshal([]byte(p.Load), &l) == nil {
			loads = append(loads, l)
		}
	}
	if r.peers != nil {
		r.peers.SetRoutes(relay.Routes(live, r.id))
	}
	s.Gateway.SetPeerLoads(loads...)
	r.mu.Lock()
	r.live, r.load = ids, loads
	r.mu.Unlock()
	return nil
}

// LiveReplicas answers the IDs of the replicas this one saw live at its
// last heartbeat, itself among them (none before the first, or where the
// registry does not run: a SQLite store).
func (s *Replica) LiveReplicas() []string {
	if s.reg == nil {
		return nil
	}
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	return slices.Clone(s.reg.live)
}

// alone reports whether this replica is the only one that writes the
// store: its store is SQLite (no registry: one replica), or it alone was
// live at the registry's last heartbeat. Before the first heartbeat it is
// not known, and false.
func (s *Replica) alone() bool {
	if s.reg == nil {
		return true
	}
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	return len(s.reg.live) == 1 && s.reg.live[0] == s.reg.id
}

// peerLoads answers the other replicas' gateway loads of the last
// heartbeat.
func (s *Replica) peerLoads() []map[string]gateway.Load {
	if s.reg == nil {
		return nil
	}
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	return s.reg.load
}
