package service

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
)

// Assignments lists what a's host must run or stop: every instance holding
// an allocation there, "run" while scheduled, starting or running, "stop"
// while stopping or terminating. An instance that a stack created as a
// member of a job (tags TagStack and TagStackJob) carries its place in
// the job (stackJobs): its rank, the job's size, its peers and the
// launchers' environment. An instance on a private network carries its
// place on it (agentapi.InstanceNetwork: readNetIndex reads the networks,
// subnets and public addresses once per call, not per instance). An
// instance that owns the host's fabric gets its RDMA adapters (rdmaRule),
// and each its offering's instance store (InstanceStoreGiB).
func (s *Agents) Assignments(ctx context.Context, a Actor) ([]agentapi.Assignment, error) {
	if err := agentOnly(a); err != nil {
		return nil, err
	}
	grace := int((s.opts.StopGrace + time.Second - 1) / time.Second)
	var out []agentapi.Assignment
	err := s.tx(ctx, func(tx cloud.Tx) error {
		ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{HostID: a.HostID, States: cloud.HoldingStates()})
		if err != nil {
			return err
		}
		jobs, err := stackJobs(ctx, tx, ins)
		if err != nil {
			return err
		}
		nets, err := readNetIndex(ctx, tx, ins)
		if err != nil {
			return err
		}
		rdma := newRDMARule(a.HostID)
		sizes := volumeSizes{}
		out = make([]agentapi.Assignment, 0, len(ins))
		for _, in := range ins {
			desired := agentapi.DesiredRun
			if in.State == cloud.Stopping || in.State == cloud.Terminating {
				desired = agentapi.DesiredStop
			}
			out = append(out, agentapi.Assignment{InstanceID: in.ID, TenantID: in.TenantID,
				Offering: in.Offering, Desired: desired, Placement: in.Placement, Image: in.Image, Command: in.Command,
				Env: in.Env, Volumes: in.Volumes, Tags: in.Tags, GraceSeconds: grace,
				Interruption: in.Interruption, Market: in.Market, SpotRequestID: in.SpotRequestID, ScaleIn: in.ScaleIn,
				Stack: stackInfo(in, jobs), Network: nets.of(in), Pause: in.State == cloud.Paused})
			if out[len(out)-1].RDMA, err = rdma.wants(ctx, tx, in); err != nil {
				return err
			}
			last := &out[len(out)-1]
			if last.VolumeSizes, last.SharedVolumes, err = sizes.of(ctx, tx, in.Volumes); err != nil {
				return err
			}
			// The instance store is the offering's, as the catalog says
			// now; an offering the catalog no longer has gets none.
			if o, err := s.cat.Offering(in.Offering); err == nil {
				last.InstanceStoreGiB = o.InstanceStoreGiB
			}
		}
		return nil
	})
	return out, err
}

// jobKey names a stack's job: the instances of one tenant's stack that
// carry the same TagStackJob.
type jobKey struct{ tenant, stack, job string }

// jobOf is the job an instance belongs to, if any.
func jobOf(in *cloud.Instance) (jobKey, bool) {
	k := jobKey{tenant: in.TenantID, stack: in.Tags[TagStack], job: in.Tags[TagStackJob]}
	return k, k.tenant != "" && k.stack != "" && k.job != ""
}

// jobMember is one instance of a job, with its rank.
type jobMember struct {
	rank int
	in   *cloud.Instance
}

// jobStates are the states of the instances that count as a job's
// members: every state but terminating, terminated and failed, whose
// instances will not run again (a replacement takes their rank).
var jobStates = []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Paused, cloud.Stopping, cloud.Stopped, cloud.Lost}

// stackJobs reads the members of the jobs the instances ins belong to, by
// rank: one listing per tenant among them, whatever the number of
// instances and jobs, and only ever the tenant's own instances, so that
// another tenant's instances with the same tags are never peers. A member
// whose rank tag is not a rank is left out.
func stackJobs(ctx context.Context, tx cloud.Tx, ins []*cloud.Instance) (map[jobKey][]jobMember, error) {
	wanted := map[jobKey]bool{}
	tenants := map[string]bool{}
	for _, in := range ins {
		if k, ok := jobOf(in); ok {
			wanted[k], tenants[k.tenant] = true, true
		}
	}
	jobs := make(map[jobKey][]jobMember, len(wanted))
	for _, tenant := range slices.Sorted(maps.Keys(tenants)) {
		all, err := tx.ListInstances(ctx, cloud.InstanceFilter{TenantID: tenant, States: jobStates})
		if err != nil {
			return nil, err
		}
		for _, in := range all {
			k, ok := jobOf(in)
			if !ok || !wanted[k] || in.TenantID != tenant {
				continue
			}
			if rank, ok := tagInt(in.Tags, TagStackRank, 0); ok {
				jobs[k] = append(jobs[k], jobMember{rank: rank, in: in})
			}
		}
	}
	for _, ms := range jobs {
		slices.SortFunc(ms, func(a, b jobMember) int {
			// By rank; of two with one rank (a stopped instance and its
			// replacement), the one whose address is known first.
			if c := cmp.Compare(a.rank, b.rank); c != 0 {
				return c
			}
			if ka, kb := peerAddress(a.in) != "", peerAddress(b.in) != ""; ka != kb {
				if ka {
					return -1
				}
				return 1
			}
			return strings.Compare(a.in.ID, b.in.ID)
		})
	}
	return jobs, nil
}

// tagInt parses a decimal tag of at least lowest.
func tagInt(tags map[string]string, key string, lowest int) (int, bool) {
	n, err := strconv.Atoi(tags[key])
	return n, err == nil && n >= lowest
}

// peerAddress is an instance's private address while it is known to be
// current. On a private network (SubnetID set) that is from its create on:
// the subnet gave it, and it holds it until it terminates, wherever it
// runs. Otherwise the agent reports it as the workload runs, and an
// address kept from an earlier run (a stopped instance, or one started
// again and not running yet) may be another host's.
func peerAddress(in *cloud.Instance) string {
	if in.SubnetID != "" {
		return in.PrivateAddress
	}
	if in.State == cloud.Running || in.State == cloud.Stopping {
		return in.PrivateAddress
	}
	return ""
}

// stackInfo is an instance's place in its job; nil when it is in none, or
// when its rank or world size tag is not a number (0 or more, 1 or more).
func stackInfo(in *cloud.Instance, jobs map[jobKey][]jobMember) *agentapi.StackInfo {
	k, ok := jobOf(in)
	if !ok {
		return nil
	}
	rank, ok1 := tagInt(in.Tags, TagStackRank, 0)
	world, ok2 := tagInt(in.Tags, TagStackWorld, 1)
	if !ok1 || !ok2 {
		return nil
	}
	members := jobs[k]
	st := &agentapi.StackInfo{Name: k.stack, Resource: in.Tags[TagStackResource], Rank: rank, WorldSize: world,
		Peers: make([]agentapi.Peer, 0, min(len(members), agentapi.MaxStackPeers))}
	master := ""
	for _, m := range members {
		addr := peerAddress(m.in)
		if m.rank == 0 && master == "" {
			master = addr
		}
		if len(st.Peers) < agentapi.MaxStackPeers {
			st.Peers = append(st.Peers, agentapi.Peer{Rank: m.rank, InstanceID: m.in.ID, Address: addr})
		}
	}
	st.Env = map[string]string{
		agentapi.EnvMasterPort: strconv.Itoa(agentapi.StackMasterPort),
		agentapi.EnvWorldSize:  strconv.Itoa(world),
		agentapi.EnvNNodes:     strconv.Itoa(world),
		agentapi.EnvRank:       strconv.Itoa(rank),
		agentapi.EnvNodeRank:   strconv.Itoa(rank),
	}
	if master != "" {
		st.Env[agentapi.EnvMasterAddr] = master
	}
	return st
}
