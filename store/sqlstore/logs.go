package sqlstore

import (
	"context"
	"database/sql"

	"github.com/gpucloud/gpucloud/cloud"
)

// An instance's output log is a byte stream stored as contiguous chunks in
// instance_logs: a chunk holds the bytes [pos, pos+length(data)) of the
// stream. Agents send output in pieces of any size; small pieces are merged
// into the newest chunk up to mergeLimit, so that a chatty workload does not
// leave one row per line. When the stream outgrows its cap, whole chunks
// are deleted from the front and the oldest remaining one is cut, so that
// exactly the newest keep bytes stay.

// mergeLimit is the size up to which appends grow the newest chunk instead
// of adding a row.
const mergeLimit = 64 << 10

// logEnd returns the newest chunk's position and size; found is false for
// an empty log.
func (t *tx) logEnd(ctx context.Context, id string) (pos, size int64, found bool, err error) {
	found = true
	err = t.get(ctx, "find the end of the log of instance "+id, func() error { found = false; return nil },
		"SELECT pos, length(data) FROM instance_logs WHERE instance_id = ? ORDER BY pos DESC LIMIT 1",
		[]any{id}, &pos, &size)
	return pos, size, found, err
}

func (t *tx) AppendLog(ctx context.Context, id string, data []byte, keep int64) (int64, error) {
	if keep <= 0 {
		return 0, invalidf("log cap %d is not positive", keep)
	}
	if err := t.mustExist(ctx, "instances", "instance", id); err != nil {
		return 0, err
	}
	lastPos, lastSize, found, err := t.logEnd(ctx, id)
	if err != nil {
		return 0, err
	}
	end := lastPos + lastSize
	if len(data) == 0 {
		return end, nil
	}
	newEnd := end + int64(len(data))
	if int64(len(data)) > keep {
		data = data[int64(len(data))-keep:]
	}
	op := "append to the log of instance " + id
	if found && lastSize+int64(len(data)) <= mergeLimit && newEnd-int64(len(data)) == end {
		var old []byte
		err := t.get(ctx, op, func() error { return notFoundf("log chunk of instance %s vanished", id) },
			"SELECT data FROM instance_logs WHERE instance_id = ? AND pos = ?", []any{id, lastPos}, &old)
		if err != nil {
			return 0, err
		}
		merged := append(append(make([]byte, 0, len(old)+len(data)), old...), data...)
		if _, err := t.exec(ctx, op, "UPDATE instance_logs SET data = ? WHERE instance_id = ? AND pos = ?",
			merged, id, lastPos); err != nil {
			return 0, err
		}
	} else if _, err := t.exec(ctx, op, "INSERT INTO instance_logs (instance_id, pos, data) VALUES (?, ?, ?)",
		id, newEnd-int64(len(data)), data); err != nil {
		return 0, err
	}
	return newEnd, t.trimLog(ctx, id, newEnd-keep)
}

// trimLog drops the bytes of an instance's log before offset cut: whole
// chunks that end by then, and the front of the one that straddles it.
func (t *tx) trimLog(ctx context.Context, id string, cut int64) error {
	if cut <= 0 {
		return nil
	}
	op := "trim the log of instance " + id
	if _, err := t.exec(ctx, op, "DELETE FROM instance_logs WHERE instance_id = ? AND pos + length(data) <= ?",
		id, cut); err != nil {
		return err
	}
	var pos int64
	var data []byte
	found := true
	err := t.get(ctx, op, func() error { found = false; return nil },
		"SELECT pos, data FROM instance_logs WHERE instance_id = ? AND pos < ?", []any{id, cut}, &pos, &data)
	if err != nil || !found {
		return err
	}
	_, err = t.exec(ctx, op, "UPDATE instance_logs SET pos = ?, data = ? WHERE instance_id = ? AND pos = ?",
		cut, append([]byte(nil), data[cut-pos:]...), id, pos)
	return err
}

func (t *tx) ReadLog(ctx context.Context, id string, offset int64, limit int) (*cloud.LogChunk, error) {
	if offset < 0 {
		return nil, invalidf("log offset %d is negative", offset)
	}
	if limit <= 0 {
		return nil, invalidf("log read size %d is not positive", limit)
	}
	if err := t.mustExist(ctx, "instances", "instance", id); err != nil {
		return nil, err
	}
	op := "read the log of instance " + id
	out := &cloud.LogChunk{Data: []byte{}}
	err := t.get(ctx, op, func() error { return nil },
		"SELECT COALESCE(MIN(pos), 0), COALESCE(MAX(pos + length(data)), 0) FROM instance_logs WHERE instance_id = ?",
		[]any{id}, &out.First, &out.End)
	if err != nil {
		return nil, err
	}
	if offset > out.End {
		return nil, invalidf("offset %d is past the end of the log of instance %s (%d)", offset, id, out.End)
	}
	out.Start = max(offset, out.First)
	if out.Start == out.End {
		return out, nil
	}
	// The chunk holding Start is the last one that begins at or before it;
	// read from there in order until limit bytes are in hand.
	var from sql.NullInt64
	if err := t.get(ctx, op, func() error { return nil },
		"SELECT MAX(pos) FROM instance_logs WHERE instance_id = ? AND pos <= ?", []any{id, out.Start}, &from); err != nil {
		return nil, err
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	rows, err := t.query(ctx,
		"SELECT pos, data FROM instance_logs WHERE instance_id = ? AND pos >= ? ORDER BY pos", []any{id, from.Int64})
	if err != nil {
		return nil, t.fail(op, err)
	}
	defer rows.Close()
	for len(out.Data) < limit && rows.Next() {
		var pos int64
		var data []byte
		if err := rows.Scan(&pos, &data); err != nil {
			return nil, t.fail(op, err)
		}
		if pos < out.Start {
			data = data[out.Start-pos:]
		}
		out.Data = append(out.Data, data[:min(len(data), limit-len(out.Data))]...)
	}
	if err := rows.Err(); err != nil {
		return nil, t.fail(op, err)
	}
	return out, nil
}
