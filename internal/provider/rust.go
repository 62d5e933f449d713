package provider

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"

	"github.com/BurntSushi/toml"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// Rust is a cargo package. Its crates come from the Debian packages installed under
// CrateRegistry, offline: crates.io is replaced by that directory, so a dependency no
// package provides fails naming the crate. Its preview runs the binary as the app.
type Rust struct{}

var _ RuntimeProvider = Rust{}

// CrateRegistry is where Debian's librust-*-dev packages put their crates' sources, each
// with the checksums a cargo directory source wants.
const CrateRegistry = "/usr/share/cargo/registry"

func (Rust) ID() string        { return "rust" }
func (Rust) Markers() []string { return []string{"Cargo.toml"} }

func (r Rust) Detect(ctx context.Context, ws Workspace, dir string) (Project, bool, error) {
	b, err := ws.ReadFile(ctx, path.Join(dir, "Cargo.toml"))
	if errors.Is(err, ErrNoFile) {
		return Project{}, false, nil
	} else if err != nil {
		return Project{}, false, err
	}
	name, err := ParseCargoToml(b)
	if err != nil {
		return Project{}, false, err
	}
	return Project{Runtime: r.ID(), Dir: dir, Name: name}, true, nil
}

// maxCargoToml bounds the Cargo.toml read: a real one is a few KiB.
const maxCargoToml = 1 << 20

// ParseCargoToml is the package name of a Cargo.toml: the name of the binary it builds.
func ParseCargoToml(b []byte) (string, error) {
	if len(b) > maxCargoToml {
		return "", fmt.Errorf("manifest Cargo.toml: %d bytes, more than %d: %w", len(b), maxCargoToml, errdefs.ErrInvalidArgument)
	}
	var m struct {
		Package *struct {
			Name string `toml:"name"`
		} `toml:"package"`
	}
	if _, err := toml.Decode(string(b), &m); err != nil {
		return "", fmt.Errorf("manifest Cargo.toml is not valid TOML (%v): fix it or run cargo init: %w", err, errdefs.ErrInvalidArgument)
	}
	if m.Package == nil || m.Package.Name == "" {
		return "", fmt.Errorf("manifest Cargo.toml has no [package] name: a workspace of several packages is not supported; build one package's directory: %w", errdefs.ErrInvalidArgument)
	}
	return m.Package.Name, nil
}

// cargoOffline points crates.io at the packaged crates and keeps cargo off the network.
var cargoOffline = []string{"--offline",
	"--config", `source.crates-io.replace-with="debian-packages"`,
	"--config", `source.debian-packages.directory="` + CrateRegistry + `"`}

func cargoCmd(args ...string) Command {
	name := "cargo " + args[0]
	return Command{Name: name, Argv: append(append([]string{"cargo"}, args...), cargoOffline...), Env: []string{"CARGO_TERM_COLOR=never"}}
}

// Resolve locks the dependencies against the packaged crates.
func (Rust) Resolve(Project) []Command { return []Command{cargoCmd("fetch")} }
func (Rust) Build(Project) []Command   { return []Command{cargoCmd("build")} }

// Validate runs the tests, and clippy with its warnings as errors.
func (Rust) Validate(Project) []Command {
	clippy := cargoCmd("clippy")
	clippy.Argv = append(clippy.Argv, "--", "-D", "warnings")
	return []Command{cargoCmd("test"), clippy}
}

// Package builds the release binary into .paddock/out/app.
func (Rust) Package(p Project) ([]Command, string) {
	build := cargoCmd("build", "--release")
	cp := Command{Name: "copy the binary", Argv: []string{"sh", "-c",
		`mkdir -p .paddock/out && cp -- "target/release/$1" .paddock/out/app`, "sh", p.Name}}
	return []Command{build, cp}, ".paddock/out"
}

// Preview builds the binary and runs it, listening on PORT. It does not reload by itself.
func (Rust) Preview(p Project, port int) api.ProviderPreview {
	build := ""
	for _, a := range append([]string{"cargo", "build"}, cargoOffline...) {
		build += shellQuote(a) + " "
	}
	return api.ProviderPreview{
		Command: []string{"sh", "-c", build + `&& exec "target/debug/$1"`, "sh", p.Name},
		Dir:     p.Dir, Env: []string{"PORT=" + strconv.Itoa(port), "CARGO_TERM_COLOR=never"}, Port: port, Ready: "/",
	}
}

func (Rust) Cleanup(Project) []string { return []string{"target", ".paddock"} }

// Registries is none: cargo runs offline, from Debian's packaged crates.
func (Rust) Registries(context.Context, Workspace, Project, []string) ([]string, error) {
	return nil, nil
}

// Scaffold is a package with no dependencies: a std-only HTTP server on $PORT and a test.
func (Rust) Scaffold(name string) (map[string][]byte, error) {
	return map[string][]byte{
		"Cargo.toml": []byte(`[package]
name = "` + name + `"
version = "0.1.0"
edition = "2021"

[dependencies]
`),
		".gitignore": []byte("target\n.paddock\n"),
		"src/main.rs": []byte(`//! ` + name + ` serves its page on $PORT.
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};

fn greeting() -> String {
    String::from("hello from ` + name + `")
}

fn main() -> std::io::Result<()> {
    let port = std::env::var("PORT").unwrap_or_else(|_| String::from("8080"));
    let listener = TcpListener::bind(format!("0.0.0.0:{port}"))?;
    for stream in listener.incoming().flatten() {
        // A client that goes away early ends its connection, not the server.
        if let Err(e) = serve(stream) {
            eprintln!("{e}");
        }
    }
    Ok(())
}

fn serve(mut stream: TcpStream) -> std::io::Result<()> {
    // The request line and headers, up to the blank line.
    let mut reader = BufReader::new(&stream);
    let mut line = String::new();
    while reader.read_line(&mut line)? > 2 {
        line.clear();
    }
    let body = greeting() + "\n";
    write!(stream, "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
}

#[cfg(test)]
mod tests {
    #[test]
    fn greets() {
        assert!(super::greeting().starts_with("hello"));
    }
}
`),
	}, nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	out := "'"
	for _, r := range s {
		if r == '\'' {
			out += `'\''`
		} else {
			out += string(r)
		}
	}
	return out + "'"
}
