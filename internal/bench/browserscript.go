package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// browserScript is a Node script of tests/browser driving Chromium for a table: one JSON
// request per line on its stdin, one JSON answer per line on its stdout.
type browserScript struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// startBrowserScript starts tests/browser/name.
func startBrowserScript(ctx context.Context, name string) (*browserScript, error) {
	dir, err := browserScripts()
	if err != nil {
		return nil, err
	}
	s := &browserScript{cmd: exec.CommandContext(ctx, "node", filepath.Join(dir, name))}
	s.cmd.Dir = dir
	s.cmd.Env = append(os.Environ(), "CHROMIUM=/usr/bin/chromium")
	s.cmd.Stderr = os.Stderr
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s.out = bufio.NewScanner(stdout)
	s.out.Buffer(nil, 1<<20)
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return s, nil
}

// ask sends req and reads its answer; an answer carrying an error is that error.
func (s *browserScript) ask(req map[string]any) (answer, error) {
	b, _ := json.Marshal(req)
	if _, err := s.in.Write(append(b, '\n')); err != nil {
		return answer{}, fmt.Errorf("browser script: %w", err)
	}
	if !s.out.Scan() {
		return answer{}, fmt.Errorf("browser script ended before answering %s: %v", req["op"], s.out.Err())
	}
	var a answer
	if err := json.Unmarshal(s.out.Bytes(), &a); err != nil {
		return answer{}, fmt.Errorf("browser script: %w: %q", err, s.out.Text())
	}
	if a.Error != "" {
		return a, fmt.Errorf("browser %s: %s", req["op"], a.Error)
	}
	return a, nil
}

// stop closes the script's stdin, which ends it, and waits for it (killing it after 30 s).
// A nil script is stopped already.
func (s *browserScript) stop() error {
	if s == nil {
		return nil
	}
	s.in.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		return <-done
	}
}

// browserScripts finds tests/browser, with its node_modules, above the working directory.
func browserScripts() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "tests", "browser")
		if _, err := os.Stat(filepath.Join(p, "node_modules", "playwright-core", "package.json")); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no tests/browser/node_modules/playwright-core above the working directory: run make setup, and the bench from the checkout")
		}
		dir = parent
	}
}
