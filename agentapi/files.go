package agentapi

import (
	"encoding/json"
	"fmt"
	"io"
)

// The files session (`gpucloud volumes cp`, `gpucloud instances cp`): the
// server relays a session of kind SessionFiles to the agent of the host
// that holds the volume or runs the instance, and the client and the
// agent then speak internal/filexfer over the relayed connection. These
// are the protocol's header messages; file data travels as raw frames
// between them (internal/filexfer).

// FilesTarget says what a files session opens: a volume's directory or a
// running instance's filesystem. The server sends it as the session
// request's "files" field.
type FilesTarget struct {
	// VolumeID, when set, roots the session at the volume's directory.
	VolumeID string `json:"volume_id,omitempty"`
	// InstanceID, when set (and VolumeID not), roots the session at the
	// instance's filesystem: the container's root, or the process
	// runtime's working directory.
	InstanceID string `json:"instance_id,omitempty"`
	// Shared says the volume is of kind shared: its files are in the
	// host's shared volume directory, not where block volumes are.
	Shared bool `json:"shared,omitempty"`
	// SizeGiB is the volume's size: a host that keeps volumes in
	// filesystem images makes a never-used volume's image of that size
	// for the session.
	SizeGiB int64 `json:"size_gib,omitempty"`
}

// Direct sessions (docs/DATA.md, "Direct copies"; docs/ACCESS.md,
// "Direct port forwards"): where an operator lets tenants reach the
// agents (the agent's --direct-listen, the server's --direct-access), a
// client asks the server for a grant (POST /v1/{volumes,instances}/{id}/
// files/grant, POST /v1/instances/{id}/port-forward/grant), dials the
// agent's address over TLS 1.3, pinning the listener's certificate by the
// fingerprint the grant's answer gives, and sends a DirectHello with the
// grant. The agent checks the grant against the cloud's CA offline and
// answers a DirectWelcome; the connection then carries the files protocol
// or the forwarded port's bytes, as a relayed session would, with no
// server in the data path.

// DirectGrantPurpose is the purpose the CA signs a DirectGrant for
// (pki.SignToken).
const DirectGrantPurpose = "gpucloud direct grant v1"

// DirectGrant is what a grant allows: sessions of Kind (SessionFiles on
// Target, or SessionForward to Port inside instance Target.InstanceID),
// on host HostID's agent, opened until Expires (Unix seconds), at most
// MaxDirectConns of them at once. A session opened in time runs until it
// ends.
type DirectGrant struct {
	ID        string      `json:"id"`
	Kind      string      `json:"kind"`
	HostID    string      `json:"host_id"`
	TenantID  string      `json:"tenant_id"`
	Actor     string      `json:"actor"`
	SessionID string      `json:"session_id"`
	Target    FilesTarget `json:"target"`
	Port      int         `json:"port,omitempty"`
	Expires   int64       `json:"exp"`
	// ClientKey binds the grant to the client that asked for it: the
	// fingerprint (pki.Fingerprint) of the TLS certificate the client
	// presents, whose key it made for this grant and keeps. A grant
	// that leaks is no use to anyone without that key.
	ClientKey string `json:"client_key"`
}

// MaxDirectConns is how many connections one grant holds open at most.
const MaxDirectConns = 16

// DirectHello is a direct connection's first message, and DirectWelcome
// the agent's answer: each one line of JSON. A refused grant is answered
// with the error and the connection closed.
type DirectHello struct {
	Grant string `json:"grant"`
}

// DirectWelcome answers a DirectHello.
type DirectWelcome struct {
	Error *FileError `json:"error,omitempty"`
}

// MaxDirectLine bounds a DirectHello or DirectWelcome line.
const MaxDirectLine = 32 << 10

// WriteDirectLine writes v as one line of JSON (a DirectHello or a
// DirectWelcome).
func WriteDirectLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadDirectLine reads one line into v (JSON, at most MaxDirectLine
// bytes). It reads a byte at a time, so that nothing after the line, the
// files protocol, is consumed.
func ReadDirectLine(r io.Reader, v any) error {
	var line []byte
	b := make([]byte, 1)
	for len(line) <= MaxDirectLine {
		if _, err := io.ReadFull(r, b); err != nil {
			return err
		}
		if b[0] == '\n' {
			return json.Unmarshal(line, v)
		}
		line = append(line, b[0])
	}
	return fmt.Errorf("a line over %d bytes", MaxDirectLine)
}

// The operations of a files session.
const (
	FileOpStat  = "stat"  // one path's FileInfo, and the size of its partial upload
	FileOpList  = "list"  // a directory's entries, recursively
	FileOpPut   = "put"   // write a file from Offset, through a hidden partial file
	FileOpGet   = "get"   // read a file from Offset
	FileOpSum   = "sum"   // a file's checksum
	FileOpMkdir = "mkdir" // a directory and its parents
)

// FileRequest is one operation. Paths are slash-separated and resolved
// inside the session's root: "/" is the root, ".." never leaves it.
type FileRequest struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	// Offset is where a put resumes (the size of the partial file, which
	// the agent keeps up to there) or where a get starts.
	Offset int64 `json:"offset,omitempty"`
	// Size is a put's total size: the data frames carry Size-Offset bytes.
	Size int64 `json:"size,omitempty"`
	// Mode is the permission bits of a put's file or a mkdir's directory
	// (0o644 and 0o755 when zero).
	Mode uint32 `json:"mode,omitempty"`
	// Checksum is the algorithm of the Sum a put, a get or a sum answers
	// with: ChecksumCRC32C or ChecksumSHA256 (the default, and what an
	// agent from before the field answers with).
	Checksum string `json:"checksum,omitempty"`
}

// The checksums of a files session. CRC-32C is what gcloud storage and
// S3 check whole objects with, computed in hardware at over 20 GB/s;
// SHA-256 (about 1.7 GB/s with SHA-NI) took a fifth of a copy's CPU
// (docs/BENCHMARKS.md). TLS already authenticates every byte
// on the way: the checksum at the end catches what TLS cannot, a resume
// from the wrong offset or a disk that changed the bytes.
const (
	ChecksumCRC32C = "crc32c"
	ChecksumSHA256 = "sha256"
)

// FileInfo describes one file or directory. In a list, Path is relative
// to the listed directory.
type FileInfo struct {
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	Mode  uint32 `json:"mode"` // permission bits
	IsDir bool   `json:"is_dir,omitempty"`
	// Partial is the size of the file's partial upload, which a put can
	// resume from (stat only; 0: none).
	Partial int64 `json:"partial,omitempty"`
}

// FileResponse answers a request. A put is answered twice: once ready
// (before the data, or with the error that refuses it) and once done; a
// get once before its data (Info with the file's size) and once after
// (Sum); a list with as many responses as it takes, the last with Done.
type FileResponse struct {
	Error   *FileError `json:"error,omitempty"`
	Info    *FileInfo  `json:"info,omitempty"`
	Entries []FileInfo `json:"entries,omitempty"`
	Done    bool       `json:"done,omitempty"`
	// Sum is the checksum (hex) of the whole file: a sum's answer, a
	// put's done and a get's trailer; Checksum names its algorithm
	// (empty: SHA-256).
	Sum      string `json:"sum,omitempty"`
	Checksum string `json:"checksum,omitempty"`
}

// FileError is an operation's failure; the session goes on.
type FileError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// The codes of FileError.
const (
	FileNotFound   = "not_found"
	FileInvalid    = "invalid"      // a bad path, op or offset
	FileIsDir      = "is_dir"       // a file op on a directory
	FileNotDir     = "not_dir"      // a directory op on a file, or a file in the way of a parent
	FileNoSpace    = "no_space"     // the volume or filesystem is full (ENOSPC, EDQUOT)
	FilePermission = "permission"   // the path is not the tenant's to touch
	FileInternal   = "internal"     // anything else
	FileOutOfRange = "out_of_range" // a resume offset past the partial file
	FileBusy       = "busy"         // another copy is writing the same file
)

func (e *FileError) Error() string { return e.Code + ": " + e.Message }

// LabelVolumeDirShared is the host label ("true") of an agent whose
// volumes live on a filesystem every such host mounts
// (agent.Config.VolumeDir): the server sends a detached volume's copy to
// any healthy one of them. (Not "shared-volumes", which says a host can
// mount volumes of kind shared.)
const LabelVolumeDirShared = "volume-dir-shared"
