package microvm

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// qmp is a minimal client of QEMU's machine protocol: JSON objects, one per line. paddock
// needs two commands, so a library would be more than the protocol.
type qmp struct {
	c net.Conn
	r *bufio.Reader
}

func dialQMP(path string, deadline time.Time) (*qmp, error) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(deadline)
	q := &qmp{c: c, r: bufio.NewReader(c)}
	if _, err := q.r.ReadBytes('\n'); err != nil { // the greeting
		c.Close()
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	if err := q.execute("qmp_capabilities"); err != nil {
		c.Close()
		return nil, err
	}
	return q, nil
}

// execute runs a command without arguments and waits for its answer, skipping events.
func (q *qmp) execute(cmd string) error {
	b, _ := json.Marshal(map[string]string{"execute": cmd})
	if _, err := q.c.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("qmp %s: %w", cmd, err)
	}
	for {
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			return fmt.Errorf("qmp %s: %w", cmd, err)
		}
		var reply struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Desc string `json:"desc"`
			} `json:"error"`
		}
		if err := json.Unmarshal(line, &reply); err != nil {
			return fmt.Errorf("qmp %s: %w", cmd, err)
		}
		switch {
		case reply.Error != nil:
			return fmt.Errorf("qmp %s: %s", cmd, reply.Error.Desc)
		case reply.Return != nil:
			return nil
		}
	}
}

func (q *qmp) close() { q.c.Close() }
