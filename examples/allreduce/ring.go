package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config is one rank's part in an all-reduce.
type Config struct {
	Rank, World int
	// Master is host:port of rank 0's rendezvous listener, which the
	// other ranks dial (MASTER_ADDR:MASTER_PORT).
	Master string
	// Listen is where a rank listens for its ring predecessor: ":0" (every
	// interface, a port the kernel picks) unless a test says otherwise.
	Listen string
	// Bytes is the size of the vector reduced, in bytes (float32s).
	Bytes int64
	// Iters are the timed all-reduces, after one untimed warm-up.
	Iters int
	// DialTimeout bounds the wait for the master (a worker may start
	// before its head listens); Timeout bounds the whole run.
	DialTimeout, Timeout time.Duration
	// Progress, when set, is told of each stage reached (the rendezvous,
	// the ring), so that a run that hangs says where.
	Progress func(format string, args ...any)
}

func (cfg Config) progress(format string, args ...any) {
	if cfg.Progress != nil {
		cfg.Progress(format, args...)
	}
}

// Result is what a rank measured: the mean time of one all-reduce and the
// bandwidths as NCCL's tests define them.
type Result struct {
	PerIter time.Duration
	// AlgBW is Bytes over PerIter; BusBW is AlgBW·2(W−1)/W, the traffic
	// each link carries in a ring, comparable across world sizes. GB/s
	// (10⁹ bytes).
	AlgBW, BusBW float64
}

// magic starts every handshake, so that a stray connection to the port
// is refused at once rather than misread.
const magic = "ARv1"

// segment is how much of a chunk moves at once: sending and adding
// overlap in pieces of this size.
const segment = 1 << 20

// Run takes this rank's part in Iters+1 ring all-reduces of a vector of
// Bytes/4 float32s and checks each result. Rank 0 serves the rendezvous
// on master (the others ignore it): every other rank dials it, says its
// rank and the port of its ring listener, and gets the address of every
// rank back; then each rank connects to its successor and accepts its
// predecessor, and the all-reduces run around that ring.
func Run(ctx context.Context, cfg Config, master net.Listener) (Result, error) {
	if err := cfg.check(); err != nil {
		return Result{}, err
	}
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	n := int(cfg.Bytes / 4)
	buf := make([]float32, n)
	if cfg.World == 1 {
		return measure(ctx, cfg, buf, nil, nil)
	}
	lc := net.ListenConfig{}
	listen := cfg.Listen
	if listen == "" {
		listen = ":0"
	}
	ring, err := lc.Listen(ctx, "tcp", listen)
	if err != nil {
		return Result{}, fmt.Errorf("ring listener: %w", err)
	}
	defer ring.Close()
	port := ring.Addr().(*net.TCPAddr).Port
	var peers []string
	if cfg.Rank == 0 {
		peers, err = serveRendezvous(ctx, cfg, master, port)
	} else {
		peers, err = joinRendezvous(ctx, cfg, port)
	}
	if err != nil {
		return Result{}, err
	}
	cfg.progress("rendezvous at %s done: ranks at %s", cfg.Master, strings.Join(peers, " "))
	next, prev, err := connectRing(ctx, cfg, ring, peers)
	if err != nil {
		return Result{}, err
	}
	cfg.progress("ring connected: to %s, from %s", next.RemoteAddr(), prev.RemoteAddr())
	defer next.Close()
	defer prev.Close()
	// Every read and write ends by the run's deadline.
	if d, ok := ctx.Deadline(); ok {
		_ = next.SetDeadline(d)
		_ = prev.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { next.Close(); prev.Close() })
	defer stop()
	return measure(ctx, cfg, buf, next, prev)
}

func (cfg Config) check() error {
	switch {
	case cfg.World < 1:
		return fmt.Errorf("world size %d: want at least 1", cfg.World)
	case cfg.Rank < 0 || cfg.Rank >= cfg.World:
		return fmt.Errorf("rank %d: want 0 to %d", cfg.Rank, cfg.World-1)
	case cfg.Bytes < 4*int64(cfg.World) || cfg.Bytes%4 != 0:
		return fmt.Errorf("bytes %d: want a multiple of 4, at least 4 per rank", cfg.Bytes)
	case cfg.Iters < 1:
		return fmt.Errorf("iters %d: want at least 1", cfg.Iters)
	}
	return nil
}

// measure runs the warm-up and the timed all-reduces, each on a freshly
// filled vector, and checks every result.
func measure(ctx context.Context, cfg Config, buf []float32, next io.Writer, prev io.Reader) (Result, error) {
	var total time.Duration
	for it := 0; it <= cfg.Iters; it++ {
		if err := ctx.Err(); err != nil {
			return Result{}, fmt.Errorf("iteration %d: %w", it, err)
		}
		fill(buf, cfg.Rank)
		began := time.Now()
		if next != nil {
			if err := allReduce(cfg.Rank, cfg.World, buf, next, prev); err != nil {
				if ctx.Err() != nil {
					err = fmt.Errorf("%w (%v)", ctx.Err(), err)
				}
				return Result{}, fmt.Errorf("iteration %d: %w", it, err)
			}
		}
		if it > 0 { // the first is the warm-up
			total += time.Since(began)
		}
		if err := verify(buf, cfg.World); err != nil {
			return Result{}, fmt.Errorf("iteration %d: %w", it, err)
		}
	}
	per := total / time.Duration(cfg.Iters)
	r := Result{PerIter: max(per, time.Nanosecond)}
	r.AlgBW = float64(cfg.Bytes) / r.PerIter.Seconds() / 1e9
	r.BusBW = r.AlgBW * 2 * float64(cfg.World-1) / float64(cfg.World)
	return r, nil
}

// fill gives rank's vector its pattern: element i is rank+1 + i mod 16,
// so that the sum over W ranks is W(W+1)/2 + W·(i mod 16), exact in
// float32, and a chunk added twice, missed or misplaced shows.
func fill(buf []float32, rank int) {
	for i := range buf {
		buf[i] = float32(rank+1) + float32(i%16)
	}
}

// verify checks an all-reduced vector against fill's sum.
func verify(buf []float32, world int) error {
	base := float32(world * (world + 1) / 2)
	for i, v := range buf {
		if want := base + float32(world*(i%16)); v != want {
			return fmt.Errorf("element %d is %g, want %g", i, v, want)
		}
	}
	return nil
}

// chunk is the bounds of chunk c of n elements split among world ranks.
func chunk(n, world, c int) (int, int) {
	c = ((c % world) + world) % world
	return c * n / world, (c + 1) * n / world
}

// allReduce sums buf across the ring in place: world−1 steps of
// reduce-scatter (send chunk rank−s to the successor, add chunk rank−s−1
// from the predecessor), after which this rank holds chunk rank+1 whole,
// then world−1 steps of all-gather (pass the whole chunks on). Each step
// sends and receives at once, so that no rank waits on a full socket.
func allReduce(rank, world int, buf []float32, next io.Writer, prev io.Reader) error {
	n := len(buf)
	for s := range world - 1 {
		slo, shi := chunk(n, world, rank-s)
		rlo, rhi := chunk(n, world, rank-s-1)
		if err := exchange(buf[slo:shi], buf[rlo:rhi], next, prev, true); err != nil {
			return fmt.Errorf("reduce-scatter step %d: %w", s, err)
		}
	}
	for s := range world - 1 {
		slo, shi := chunk(n, world, rank-s+1)
		rlo, rhi := chunk(n, world, rank-s)
		if err := exchange(buf[slo:shi], buf[rlo:rhi], next, prev, false); err != nil {
			return fmt.Errorf("all-gather step %d: %w", s, err)
		}
	}
	return nil
}

// exchange writes send to next while it reads len(recv) float32s from
// prev, adding them to recv (add) or storing them.
func exchange(send, recv []float32, next io.Writer, prev io.Reader, add bool) error {
	var wg sync.WaitGroup
	var werr error
	wg.Go(func() { werr = writeFloats(next, send) })
	rerr := readFloats(prev, recv, add)
	wg.Wait()
	return errors.Join(rerr, werr)
}

func writeFloats(w io.Writer, v []float32) error {
	b := make([]byte, min(len(v)*4, segment))
	for len(v) > 0 {
		k := min(len(v), len(b)/4)
		for i, f := range v[:k] {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
		}
		if _, err := w.Write(b[:4*k]); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		v = v[k:]
	}
	return nil
}

func readFloats(r io.Reader, v []float32, add bool) error {
	b := make([]byte, min(len(v)*4, segment))
	for len(v) > 0 {
		k := min(len(v), len(b)/4)
		if _, err := io.ReadFull(r, b[:4*k]); err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		for i := range v[:k] {
			f := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			if add {
				v[i] += f
			} else {
				v[i] = f
			}
		}
		v = v[k:]
	}
	return nil
}

// hello is what a worker tells rank 0: its rank, the world and vector
// size it was started with (which must agree), and its ring port.
type hello struct {
	Rank, World uint32
	Bytes       uint64
	Port        uint16
}

func writeHello(w io.Writer, h hello) error {
	b := append([]byte(magic), make([]byte, 18)...)
	binary.BigEndian.PutUint32(b[4:], h.Rank)
	binary.BigEndian.PutUint32(b[8:], h.World)
	binary.BigEndian.PutUint64(b[12:], h.Bytes)
	binary.BigEndian.PutUint16(b[20:], h.Port)
	_, err := w.Write(b)
	return err
}

func readHello(r io.Reader) (hello, error) {
	b := make([]byte, 22)
	if _, err := io.ReadFull(r, b); err != nil {
		return hello{}, err
	}
	if string(b[:4]) != magic {
		return hello{}, errors.New("not an allreduce peer")
	}
	return hello{Rank: binary.BigEndian.Uint32(b[4:]), World: binary.BigEndian.Uint32(b[8:]),
		Bytes: binary.BigEndian.Uint64(b[12:]), Port: binary.BigEndian.Uint16(b[20:])}, nil
}

// writePeers sends the ring's addresses, one line each; each worker
// replaces rank 0's host with the master address it dialled, which it
// knows reaches rank 0.
func writePeers(w io.Writer, peers []string) error {
	var b []byte
	for _, p := range peers {
		b = append(b, p...)
		b = append(b, '\n')
	}
	b = append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
	_, err := w.Write(b)
	return err
}

func readPeers(r io.Reader, world int) ([]string, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > uint32(world)*300 {
		return nil, fmt.Errorf("peer table of %d bytes for %d ranks", size, world)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	var peers []string
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != '\n' {
			i++
		}
		peers = append(peers, string(b[:i]))
		b = b[min(i+1, len(b)):]
	}
	if len(peers) != world {
		return nil, fmt.Errorf("peer table of %d ranks, want %d", len(peers), world)
	}
	return peers, nil
}

// serveRendezvous is rank 0's side: it accepts every other rank on
// master, checks what each says, and sends them all the ring's addresses
// (a worker's host as rank 0 saw its connection come from).
func serveRendezvous(ctx context.Context, cfg Config, master net.Listener, port int) ([]string, error) {
	if master == nil {
		return nil, errors.New("rank 0 has no rendezvous listener")
	}
	stop := context.AfterFunc(ctx, func() { master.Close() })
	defer stop()
	peers := make([]string, cfg.World)
	host, _, _ := net.SplitHostPort(cfg.Master)
	peers[0] = net.JoinHostPort(host, strconv.Itoa(port))
	conns := make([]net.Conn, cfg.World)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	for joined := 1; joined < cfg.World; {
		c, err := master.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("rendezvous: %d of %d ranks joined: %w", joined, cfg.World, ctx.Err())
			}
			return nil, fmt.Errorf("rendezvous: %w", err)
		}
		if d, ok := ctx.Deadline(); ok {
			_ = c.SetDeadline(d)
		}
		h, err := readHello(c)
		if err != nil {
			c.Close() // a stray connection: not one of ours
			continue
		}
		r := int(h.Rank)
		switch {
		case int(h.World) != cfg.World || h.Bytes != uint64(cfg.Bytes):
			c.Close()
			return nil, fmt.Errorf("rendezvous: rank %d has world %d and bytes %d, rank 0 %d and %d", r, h.World, h.Bytes, cfg.World, cfg.Bytes)
		case r < 1 || r >= cfg.World || conns[r] != nil:
			c.Close()
			return nil, fmt.Errorf("rendezvous: a second or unknown rank %d", r)
		}
		from, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		peers[r] = net.JoinHostPort(from, strconv.Itoa(int(h.Port)))
		conns[r] = c
		joined++
	}
	for r := 1; r < cfg.World; r++ {
		if err := writePeers(conns[r], peers); err != nil {
			return nil, fmt.Errorf("rendezvous: to rank %d: %w", r, err)
		}
	}
	return peers, nil
}

// joinRendezvous is a worker's side: dial the master (retrying until
// DialTimeout: the head may not listen yet), say who this rank is, and
// read the ring's addresses.
func joinRendezvous(ctx context.Context, cfg Config, port int) ([]string, error) {
	c, err := dialRetry(ctx, cfg.Master, cfg.DialTimeout)
	if err != nil {
		return nil, fmt.Errorf("rendezvous with %s: %w", cfg.Master, err)
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	if err := writeHello(c, hello{Rank: uint32(cfg.Rank), World: uint32(cfg.World), Bytes: uint64(cfg.Bytes), Port: uint16(port)}); err != nil {
		return nil, fmt.Errorf("rendezvous with %s: %w", cfg.Master, err)
	}
	peers, err := readPeers(c, cfg.World)
	if err != nil {
		return nil, fmt.Errorf("rendezvous with %s: %w (rank 0 refused this rank?)", cfg.Master, err)
	}
	host, _, _ := net.SplitHostPort(cfg.Master)
	_, p0, _ := net.SplitHostPort(peers[0])
	peers[0] = net.JoinHostPort(host, p0)
	return peers, nil
}

// dialRetry dials addr until it answers, every 200 ms, for at most wait.
func dialRetry(ctx context.Context, addr string, wait time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no answer in %v: %w", wait, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// connectRing dials this rank's successor and accepts its predecessor,
// each connection starting with the dialling rank's hello.
func connectRing(ctx context.Context, cfg Config, ring net.Listener, peers []string) (next, prev net.Conn, err error) {
	succ := (cfg.Rank + 1) % cfg.World
	pred := (cfg.Rank + cfg.World - 1) % cfg.World
	type accepted struct {
		c   net.Conn
		err error
	}
	got := make(chan accepted, 1)
	go func() {
		c, err := acceptRank(ctx, ring, pred)
		got <- accepted{c, err}
	}()
	next, err = dialRetry(ctx, peers[succ], cfg.DialTimeout)
	if err == nil {
		err = writeHello(next, hello{Rank: uint32(cfg.Rank), World: uint32(cfg.World), Bytes: uint64(cfg.Bytes)})
	}
	if err != nil {
		ring.Close() // ends the accept
		a := <-got
		if a.c != nil {
			a.c.Close()
		}
		if next != nil {
			next.Close()
		}
		return nil, nil, fmt.Errorf("ring: to rank %d at %s: %w", succ, peers[succ], err)
	}
	a := <-got
	if a.err != nil {
		next.Close()
		return nil, nil, fmt.Errorf("ring: from rank %d: %w", pred, a.err)
	}
	return next, a.c, nil
}

// acceptRank accepts on ring until rank dials it, closing strays.
func acceptRank(ctx context.Context, ring net.Listener, rank int) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() { ring.Close() })
	defer stop()
	for {
		c, err := ring.Accept()
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, err
		}
		if d, ok := ctx.Deadline(); ok {
			_ = c.SetDeadline(d)
		}
		h, err := readHello(c)
		if err != nil || int(h.Rank) != rank {
			c.Close()
			continue
		}
		return c, nil
	}
}
