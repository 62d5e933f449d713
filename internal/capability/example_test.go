package capability_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/paddockhq/paddock/internal/capability"
)

func Example() {
	keys, err := capability.NewKeyring(1, map[uint32]capability.RootKey{1: capability.NewRootKey()})
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)

	// The control plane mints the seed's token for a sandbox.
	tok, err := capability.NewMinter(keys).Mint(capability.Claims{
		Subject:  "sandbox:sb-abc",
		Resource: "file:/workspace/src",
		Actions:  []capability.Action{capability.Read, capability.Write},
		Constraints: capability.Constraints{
			MaxSize:           100 << 20,
			AllowedExtensions: []string{".ts", ".tsx", ".css"},
			Expiry:            now.Add(time.Hour),
		},
	})
	if err != nil {
		panic(err)
	}

	// Its holder narrows it, with no key, before handing it to a build step.
	narrow, err := capability.Attenuate(tok.Encoded(), capability.Caveat{
		Resource: "file:/workspace/src/ui",
		Actions:  []capability.Action{capability.Read},
	})
	if err != nil {
		panic(err)
	}
	// A caveat that tries to widen it again changes nothing.
	widened, _ := capability.Attenuate(narrow, capability.Caveat{Resource: "file:/", Actions: []capability.Action{capability.Write}})

	v := capability.NewVerifier(keys, nil)
	for _, c := range []struct {
		token string
		req   capability.Request
	}{
		{tok.Encoded(), capability.Request{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/app.ts", Action: capability.Write, Size: 1200, Now: now}},
		{narrow, capability.Request{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/ui/button.tsx", Action: capability.Read, Now: now}},
		{narrow, capability.Request{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/app.ts", Action: capability.Read, Now: now}},
		{widened, capability.Request{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/ui/button.tsx", Action: capability.Write, Now: now}},
		{tok.Encoded(), capability.Request{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/run.exe", Action: capability.Write, Now: now}},
		{tok.Encoded(), capability.Request{Subject: "sandbox:sb-xyz", Resource: "file:/workspace/src/app.ts", Action: capability.Read, Now: now}},
		{tok.Encoded(), capability.Request{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/app.ts", Action: capability.Read, Now: now.Add(time.Hour)}},
	} {
		if _, err := v.Verify(context.Background(), c.token, c.req); err != nil {
			var ce *capability.Error
			if errors.As(err, &ce) {
				fmt.Println("refused:", ce.Reason)
			}
			continue
		}
		fmt.Println("allowed:", c.req.Action, c.req.Resource)
	}
	// Output:
	// allowed: write file:/workspace/src/app.ts
	// allowed: read file:/workspace/src/ui/button.tsx
	// refused: resource
	// refused: action
	// refused: extension
	// refused: subject
	// refused: expired
}
