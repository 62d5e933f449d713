package sandboxops

import (
	"context"
	"fmt"

	"github.com/paddockhq/paddock/internal/sandbox/agentclient"
	"github.com/paddockhq/paddock/internal/wsbackup"
)

// maxHistoryBlobs bounds the blobs a sandbox's agent may list for a backup.
const maxHistoryBlobs = 10_000_000

// agentHistory is a sandbox's history store read through its agent (wsbackup.Source):
// where the runner cannot reach it on this host, on a cluster's volume. The agent's
// listing is bounded and every blob checked against its hash and listed size as it
// arrives (agentclient.ReadBlobs); wsbackup checks the listing again.
type agentHistory struct {
	hc *agentclient.Client
}

var _ wsbackup.Source = agentHistory{}

func (a agentHistory) List(ctx context.Context) ([]byte, []wsbackup.Blob, error) {
	index, blobs, err := a.hc.ListObjects(ctx, wsbackup.MaxIndex, maxHistoryBlobs)
	if err != nil {
		return nil, nil, fmt.Errorf("the history through the sandbox's agent: %w", err)
	}
	out := make([]wsbackup.Blob, len(blobs))
	for i, b := range blobs {
		out[i] = wsbackup.Blob{Sum: b.Sum, Size: b.Size}
	}
	return index, out, nil
}

func (a agentHistory) Read(ctx context.Context, want []wsbackup.Blob, fn func(string, []byte) error) error {
	in := make([]agentclient.Blob, len(want))
	for i, b := range want {
		in[i] = agentclient.Blob{Sum: b.Sum, Size: b.Size}
	}
	return a.hc.ReadBlobs(ctx, in, wsbackup.MaxBlob, fn)
}
