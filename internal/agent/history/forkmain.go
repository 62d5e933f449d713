package history

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

// ForkMain is paddock-agent's fork-history subcommand (see wire.ForkHistorySubcommand): it
// forks (or with --check, only finds the checkpoint of) a store for the host, and prints
// what it did, or its error with its kind, as one wire.ForkInfo.
func ForkMain(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet(wire.ForkHistorySubcommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	src := fs.String("src", "", "the source store")
	dst := fs.String("dst", "", "the new store")
	at := fs.String("at", "", "the checkpoint")
	ws := fs.String("workspace", "", "the new workspace")
	uid := fs.Int("uid", -1, "owner of what the restore writes")
	gid := fs.Int("gid", -1, "group of what the restore writes")
	check := fs.Bool("check", false, "only find the checkpoint")
	overCopy := fs.Bool("over-copy", false, "the workspace is a block copy of the source's (ForkOverCopy)")
	proven := fs.Bool("proven", false, "with --over-copy: ProveFrozen proved the copy, which is not walked")
	prove := fs.Bool("prove", false, "only prove that --workspace, the source's, frozen, is the checkpoint (ProveFrozen)")
	export := fs.Bool("export", false, "write the store as an export to stdout")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%s: %w", wire.ForkHistorySubcommand, err)
	}
	if *export {
		return exportStore(*src, stdout)
	}
	var out wire.ForkInfo
	var (
		cp  Checkpoint
		tx  *Transaction
		err error
	)
	switch {
	case *prove:
		out.Proven, out.NotProven, err = ProveFrozenWhy(*src, *at, *ws)
		if err == nil {
			cp, tx, err = ReadCheckpoint(*src, *at)
		}
	case *check:
		cp, tx, err = ReadCheckpoint(*src, *at)
	default:
		var opts []Option
		if *uid >= 0 && *gid >= 0 {
			opts = append(opts, WithOwner(*uid, *gid))
		}
		var info ForkInfo
		fork := Fork
		switch {
		case *overCopy && *proven:
			fork = func(src, dst, at, ws string, _ ...Option) (ForkInfo, error) {
				return ForkOverProvenCopy(src, dst, at, ws)
			}
		case *overCopy:
			fork = ForkOverCopy
		}
		info, err = fork(*src, *dst, *at, *ws, opts...)
		cp, tx, out.Linked, out.Cloned, out.Trusted, out.Proven = info.At, info.OpenTx, info.Linked, info.Cloned, info.Trusted, info.Proven
	}
	if err != nil {
		out = wire.ForkInfo{Code: uint32(errdefs.GRPCCode(err)), Message: err.Error()}
	} else {
		out.At, out.Tree = cp.ID, cp.Tree
		if tx != nil {
			out.OpenTx, out.OpenTxMessage = tx.ID, tx.Message
		}
	}
	return json.NewEncoder(stdout).Encode(out)
}

// exportStore writes the store at src as an export: it opens it over an empty scratch
// workspace, which nothing reads.
func exportStore(src string, w io.Writer) error {
	ws, err := os.MkdirTemp("", "paddock-export-ws-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(ws)
	h, err := Open(ws, src)
	if err != nil {
		return err
	}
	defer h.Close()
	return h.Export(w)
}
