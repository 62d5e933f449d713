package coder

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

// Bounds of the browser tool.
const (
	browserActionTimeout = 30 * time.Second
	browserStartTimeout  = 60 * time.Second
	maxPageText          = 16 << 10
	maxConsoleLines      = 200
)

// chromiumBinaries are browser binaries run directly when present: Debian's
// /usr/bin/chromium is a shell script that reads /etc/chromium.d, which a sandbox does
// not see. chromiumNames are looked for on PATH after them, in order.
var (
	chromiumBinaries = []string{"/usr/lib/chromium/chromium"}
	chromiumNames    = []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"}
)

// browserSession is the browser tool: a headless Chromium in the sandbox, driven over
// the DevTools protocol, started at the first call and ended with the harness. It runs
// as the sandbox user in the sandbox's network namespace, so it reaches the sandbox's
// own loopback and, through the egress proxy, what the sandbox's policy allows: nothing
// else. Where that cannot hold (the process tier, which has no network namespace) or no
// browser is installed, every call says it is unavailable and why.
type browserSession struct {
	stateDir string
	mu       sync.Mutex      // one action at a time
	ctx      context.Context // the tab's; nil until started
	cancel   func()
	shots    int
	cmu      sync.Mutex // the console, which chromedp's goroutine appends to
	console  []string
}

// browserArgs are the browser tool's parameters.
type browserArgs struct {
	Action   string `json:"action"`
	URL      string `json:"url"`
	Selector string `json:"selector"`
	Text     string `json:"text"`
	FullPage bool   `json:"full_page"`
}

// BrowserUnavailable says why the browser tool cannot run in this environment, or "".
func BrowserUnavailable() string {
	if wire.Tier(os.Getenv(wire.TierEnv)) == wire.TierProcess {
		return "the browser is unavailable in the process tier: the sandbox has no network namespace of its own, so a browser there would reach the host's loopback; use the container or microvm tier"
	}
	if _, err := chromiumPath(); err != nil {
		return err.Error()
	}
	return ""
}

func chromiumPath() (string, error) {
	for _, p := range chromiumBinaries {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	for _, n := range chromiumNames {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("the browser is unavailable: no Chromium in this sandbox (looked for %s on PATH); the platform's host needs the chromium package, which container sandboxes see in /usr", strings.Join(chromiumNames, ", "))
}

func (b *browserSession) call(ctx context.Context, a browserArgs) (string, error) {
	if why := BrowserUnavailable(); why != "" {
		return "", fmt.Errorf("%s: %w", why, errdefs.ErrUnavailable)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch a.Action {
	case "open":
		return b.open(ctx, a.URL)
	case "text", "screenshot", "console", "click", "type":
	default:
		return "", fmt.Errorf("action %q: want open, text, screenshot, console, click or type: %w", errdefs.Clip(a.Action, 40), errdefs.ErrInvalidArgument)
	}
	if b.ctx == nil {
		return "", fmt.Errorf("no page is open: call the browser with action open and a url first: %w", errdefs.ErrFailedPrecondition)
	}
	switch a.Action {
	case "text":
		return b.text(ctx, a.Selector)
	case "screenshot":
		return b.screenshot(ctx, a.FullPage)
	case "console":
		return b.consoleLog(), nil
	case "click":
		return b.click(ctx, a.Selector)
	default:
		return b.typeText(ctx, a.Selector, a.Text)
	}
}

// checkURL allows http and https only: the sandbox's own servers on its loopback, and
// other hosts through the egress proxy, which applies the sandbox's allowlist.
func checkURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		return "", fmt.Errorf("url: required for open (the app on the sandbox's loopback, e.g. http://127.0.0.1:8080/): %w", errdefs.ErrInvalidArgument)
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return "", fmt.Errorf("url %q: want an http or https URL, e.g. http://127.0.0.1:8080/: %w", errdefs.Clip(raw, 200), errdefs.ErrInvalidArgument)
	}
	return u.String(), nil
}

// start launches the browser: headless, without Chromium's own sandbox (the paddock
// sandbox is the boundary, and the sandbox user cannot make the namespaces it needs),
// its profile in the state directory, and the egress proxy for any host not on loopback
// (Chromium sends loopback direct whatever the proxy).
func (b *browserSession) start(ctx context.Context) error {
	path, err := chromiumPath()
	if err != nil {
		return err
	}
	profile := filepath.Join(b.stateDir, "browser")
	if err := os.MkdirAll(profile, 0o700); err != nil {
		return fmt.Errorf("the browser's profile: %w", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.UserDataDir(profile), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 800),
		chromedp.Flag("proxy-server", proxyFor()))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	tab, cancelTab := chromedp.NewContext(alloc, chromedp.WithListener(b.listen))
	kill := func() { cancelTab(); cancelAlloc() }
	// The first Run starts the browser, which lives as long as the context it ran on: so
	// tab itself, bounded by a timer and the turn rather than by a derived context.
	t := time.AfterFunc(browserStartTimeout, kill)
	stop := context.AfterFunc(ctx, kill)
	err = chromedp.Do(tab)
	t.Stop()
	stop()
	if err == nil && tab.Err() != nil {
		err = fmt.Errorf("it did not start within %s", browserStartTimeout)
	}
	if err != nil {
		kill()
		return fmt.Errorf("starting the browser (%s): %w", path, err)
	}
	b.ctx, b.cancel = tab, kill
	return nil
}

// proxyFor is the egress proxy the browser uses for hosts off the loopback: the
// sandbox's, or, when its policy allows no host, an address where nothing listens, so
// that such a page fails at once and plainly.
func proxyFor() string {
	if p := os.Getenv(wire.EgressEnv); p != "" {
		return p
	}
	return "http://127.0.0.1:9"
}

// listen keeps the page's console messages and uncaught exceptions.
func (b *browserSession) listen(ev any) {
	var line string
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		var parts []string
		for _, a := range ev.Args {
			if a.Value != nil {
				parts = append(parts, strings.Trim(string(a.Value), `"`))
			} else {
				parts = append(parts, a.Description)
			}
		}
		line = fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(parts, " "))
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			msg = d.Exception.Description
		}
		line = fmt.Sprintf("uncaught exception: %s", msg)
	default:
		return
	}
	b.cmu.Lock()
	defer b.cmu.Unlock()
	b.console = append(b.console, errdefs.Clip(line, 1000))
	if len(b.console) > maxConsoleLines {
		b.console = b.console[len(b.console)-maxConsoleLines:]
	}
}

// run runs an action on the tab, bounded, and also by the turn's ctx.
func run1[T any](ctx context.Context, b *browserSession, a chromedp.Action[T]) (T, error) {
	actx, cancel := context.WithTimeout(b.ctx, browserActionTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	v, err := chromedp.Run(actx, a)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(actx.Err(), context.DeadlineExceeded) {
		return v, fmt.Errorf("the page did not respond within %s: %w", browserActionTimeout, errdefs.ErrUnavailable)
	}
	return v, err
}

const bodyText = `document.body ? document.body.innerText : ""`

func (b *browserSession) open(ctx context.Context, raw string) (string, error) {
	u, err := checkURL(raw)
	if err != nil {
		return "", err
	}
	if b.ctx == nil {
		if err := b.start(ctx); err != nil {
			return "", err
		}
	}
	b.cmu.Lock()
	b.console = nil
	b.cmu.Unlock()
	if _, err := run1(ctx, b, chromedp.Navigate(u)); err != nil {
		return "", fmt.Errorf("opening %s: %w", u, err)
	}
	title, err := run1(ctx, b, chromedp.Title())
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", u, err)
	}
	loc, err := run1(ctx, b, chromedp.Location())
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", u, err)
	}
	text, err := run1(ctx, b, chromedp.Evaluate[string](bodyText))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", u, err)
	}
	return fmt.Sprintf("opened %s\ntitle: %s\n\n%s", loc, title, errdefs.Clip(text, maxPageText)), nil
}

func (b *browserSession) text(ctx context.Context, sel string) (string, error) {
	if sel == "" {
		text, err := run1(ctx, b, chromedp.Evaluate[string](bodyText))
		return errdefs.Clip(text, maxPageText), err
	}
	text, err := run1(ctx, b, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		return "", fmt.Errorf("reading %q: %w", sel, err)
	}
	return errdefs.Clip(text, maxPageText), nil
}

func (b *browserSession) screenshot(ctx context.Context, full bool) (string, error) {
	act := chromedp.CaptureScreenshot()
	if full {
		act = chromedp.FullScreenshot(90)
	}
	png, err := run1(ctx, b, act)
	if err != nil {
		return "", fmt.Errorf("taking a screenshot: %w", err)
	}
	b.shots++
	name := filepath.Join(b.stateDir, "screenshots", fmt.Sprintf("shot-%d.png", b.shots))
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(name, png, 0o600); err != nil {
		return "", fmt.Errorf("saving the screenshot: %w", err)
	}
	return fmt.Sprintf("saved a screenshot of %d bytes to %s", len(png), name), nil
}

func (b *browserSession) consoleLog() string {
	b.cmu.Lock()
	defer b.cmu.Unlock()
	if len(b.console) == 0 {
		return "(nothing on the console since the page was opened)"
	}
	return strings.Join(b.console, "\n")
}

func (b *browserSession) click(ctx context.Context, sel string) (string, error) {
	if sel == "" {
		return "", fmt.Errorf("selector: required for click (a CSS selector): %w", errdefs.ErrInvalidArgument)
	}
	if _, err := run1(ctx, b, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible)); err != nil {
		return "", fmt.Errorf("clicking %q: %w", sel, err)
	}
	loc, err := run1(ctx, b, chromedp.Location())
	if err != nil {
		return "", fmt.Errorf("after clicking %q: %w", sel, err)
	}
	return "clicked " + sel + "; the page is at " + loc, nil
}

func (b *browserSession) typeText(ctx context.Context, sel, text string) (string, error) {
	if sel == "" {
		return "", fmt.Errorf("selector: required for type (a CSS selector): %w", errdefs.ErrInvalidArgument)
	}
	if _, err := run1(ctx, b, chromedp.SendKeys(chromedp.CSS(sel), text, chromedp.NodeVisible)); err != nil {
		return "", fmt.Errorf("typing into %q: %w", sel, err)
	}
	return fmt.Sprintf("typed %d characters into %s", len(text), sel), nil
}

// close ends the browser.
func (b *browserSession) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cancel != nil {
		b.cancel()
		b.ctx, b.cancel = nil, nil
	}
}
