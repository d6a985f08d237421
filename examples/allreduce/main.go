// Command allreduce is a small all-reduce over TCP between the nodes of a
// training stack, to check that they reach one another and to measure the
// bandwidth between them, without GPUs or NCCL. It takes torchrun's flags
// so that an image can install it as torchrun and the llm-finetune
// blueprint runs it unchanged:
//
//	torchrun --nnodes=2 --node_rank=0 --nproc_per_node=gpu \
//	    --master_addr=10.42.0.4 --master_port=29500 train.py --checkpoint-dir=/volumes/vol-1
//
// The script and everything after it are ignored; MASTER_ADDR,
// MASTER_PORT, NODE_RANK and NNODES (or WORLD_SIZE), which the metadata
// service gives every node of a stack, stand in for missing flags. Rank 0
// listens on the master port on every interface; the other ranks dial it
// (for at most --dial-timeout), the ranks form a ring, and each runs
// --iters ring all-reduces (reduce-scatter, then all-gather) of a
// --bytes vector of float32s after one warm-up, checks every result, and
// prints a line at each stage it reaches, so that a run that hangs says
// where, then its result:
//
//	allreduce: rank=1 world=2 rendezvous at 10.42.0.4:29500 done: ranks at 10.42.0.4:40113 10.42.0.5:38021
//	allreduce: rank=1 world=2 ring connected: to 10.42.0.4:40113, from 10.42.0.4:51270
//	allreduce: rank=1 world=2 master=10.42.0.4:29500 bytes=67108864 iters=5 time=161.2ms algbw=0.42 GB/s busbw=0.42 GB/s ok
//
// master is the rendezvous address the rank used (a worker reached rank 0
// there; rank 0 listened on its port). algbw and busbw as NCCL's tests
// define them: bytes over the time of one all-reduce, and that times
// 2(W−1)/W. On any error it prints "allreduce: rank=R world=W FAIL:
// reason" and exits 1 (2 for bad flags).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is main with its inputs and outputs given: the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parse(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stdout, "allreduce: FAIL: %v\n", err)
		return 2
	}
	var master net.Listener
	if cfg.Rank == 0 && cfg.World > 1 {
		_, port, _ := net.SplitHostPort(cfg.Master)
		// Every interface: the workers dial the head's private address.
		if master, err = net.Listen("tcp", ":"+port); err != nil {
			fmt.Fprintf(stdout, "allreduce: rank=0 world=%d FAIL: listen on the master port: %v\n", cfg.World, err)
			return 1
		}
		defer master.Close()
	}
	cfg.Progress = func(format string, args ...any) {
		fmt.Fprintf(stdout, "allreduce: rank=%d world=%d %s\n", cfg.Rank, cfg.World, fmt.Sprintf(format, args...))
	}
	vol, _, _ := strings.Cut(getenv("GPUCLOUD_VOLUMES"), ":")
	if vol != "" {
		// Each rank leaves a file in its first volume before the
		// all-reduce, which no rank finishes before every rank began it:
		// after it, a volume every node shares holds every rank's file.
		_ = os.WriteFile(filepath.Join(vol, fmt.Sprintf("rank-%d", cfg.Rank)), nil, 0o644)
	}
	res, err := Run(ctx, cfg, master)
	if err != nil {
		fmt.Fprintf(stdout, "allreduce: rank=%d world=%d FAIL: %v\n", cfg.Rank, cfg.World, err)
		return 1
	}
	if vol != "" {
		var ranks []string
		if es, err := os.ReadDir(vol); err == nil {
			for _, e := range es {
				if r, ok := strings.CutPrefix(e.Name(), "rank-"); ok {
					ranks = append(ranks, r)
				}
			}
		}
		fmt.Fprintf(stdout, "allreduce: rank=%d volume %s holds ranks=%s\n", cfg.Rank, vol, strings.Join(ranks, ","))
	}
	fmt.Fprintf(stdout, "allreduce: rank=%d world=%d master=%s bytes=%d iters=%d time=%v algbw=%.2f GB/s busbw=%.2f GB/s ok\n",
		cfg.Rank, cfg.World, cfg.Master, cfg.Bytes, cfg.Iters, res.PerIter.Round(time.Microsecond), res.AlgBW, res.BusBW)
	return 0
}

// parse reads torchrun's flags, this program's own and the environment's
// fallbacks into a Config.
func parse(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("allreduce", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nnodes := fs.String("nnodes", "", "number of nodes, the world size (NNODES, else WORLD_SIZE)")
	nodeRank := fs.String("node_rank", "", "this node's rank (NODE_RANK)")
	fs.String("nproc_per_node", "", "ignored (torchrun's)")
	addr := fs.String("master_addr", "", "rank 0's address (MASTER_ADDR)")
	port := fs.String("master_port", "", "rank 0's rendezvous port (MASTER_PORT, else 29500)")
	size := fs.Int64("bytes", 64<<20, "size of the vector all-reduced, in bytes")
	iters := fs.Int("iters", 5, "timed all-reduces, after one warm-up")
	dial := fs.Duration("dial-timeout", 60*time.Second, "how long a worker waits for rank 0 to answer")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound on the whole run")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	// fs.Args() is the training script and its arguments: ignored.
	or := func(v string, env ...string) string {
		for _, e := range env {
			if v != "" {
				break
			}
			v = strings.TrimSpace(getenv(e))
		}
		return v
	}
	world, err := atoi("nnodes", or(*nnodes, "NNODES", "WORLD_SIZE"))
	if err != nil {
		return Config{}, err
	}
	rank, err := atoi("node_rank", or(*nodeRank, "NODE_RANK"))
	if err != nil {
		return Config{}, err
	}
	host := or(*addr, "MASTER_ADDR")
	if host == "" {
		if rank != 0 {
			return Config{}, errors.New("no master address: --master_addr or MASTER_ADDR")
		}
		host = "127.0.0.1"
	}
	p := or(*port, "MASTER_PORT")
	if p == "" {
		p = "29500"
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return Config{}, fmt.Errorf("master port %q: want 1 to 65535", p)
	}
	cfg := Config{Rank: rank, World: world, Master: net.JoinHostPort(host, p), Bytes: *size, Iters: *iters,
		DialTimeout: *dial, Timeout: *timeout}
	if cfg.DialTimeout <= 0 || cfg.Timeout <= 0 {
		return Config{}, errors.New("timeouts must be positive")
	}
	return cfg, cfg.check()
}

// atoi parses a flag's integer, saying which flag is wrong.
func atoi(name, v string) (int, error) {
	if v == "" {
		return 0, fmt.Errorf("no --%s (nor its environment variable)", name)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("--%s %q: want an integer", name, v)
	}
	return n, nil
}
