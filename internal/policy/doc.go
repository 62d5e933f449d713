// Package policy is paddock's policy engine: typed rules loaded from one YAML file
// (attached to a user, a template or one sandbox) that decide, deterministically and
// with a reason, whether a command may run, a file may be written, a host may be
// reached, and which resource limits apply.
//
//	shell:
//	  deny: ["rm -rf /", "curl * | sh", "wget * | bash"]
//	  allow_prefixes: ["go", "npm run", "git status"]
//	  interactive: deny              # the default; allow lets terminals run undecided
//	  env: ["APP_MODE", "MY_APP_*"]   # names an exec may set besides the safe set (GatedEnv)
//	files:
//	  jail: /workspace
//	  deny_write: [".git/hooks/**", ".env"]
//	  allowed_extensions: [".ts", ".tsx", ".css"]
//	  max_file_size: 100MB
//	network:
//	  default: deny
//	  allow: ["registry.npmjs.org", "*.example.com"]
//	  deny: ["evil.example.com"]
//	resources: {memory: 1GiB, cpus: 2, pids: 512, timeout: 10m, tmp: 256MiB, file_size: 1GiB}
//
// Every decision is a [Decision]: allowed or not, the rule that decided
// ("shell.deny[1]", "files.jail", "network.default") and a reason a person can read.
// The same policy and the same input always give the same decision. A [Policy] is
// immutable once loaded and safe for concurrent use.
//
// # Threat model
//
// The input is hostile: commands, paths and host names come from an AI agent or from
// whoever controls it. The engine therefore decides on structure, never on raw text:
// shell commands are parsed with mvdan.cc/sh/v3/syntax, paths are cleaned and resolved
// against the jail, host names are normalised before they are compared. Whatever the
// engine cannot decide from the text alone is denied, with that reason. The engine is one
// layer: it says what a well-behaved runtime should refuse; the sandbox (namespaces,
// Landlock, seccomp, the egress proxy) is what holds when a decision is wrong.
//
// # Precedence
//
// Deny wins everywhere: a command that matches a shell.deny pattern is denied even when it
// starts with an allowed prefix; a path under files.deny_write is refused even with an
// allowed extension; a host in network.deny is refused even when network.allow lists it
// (exactly or by a wildcard). Within a list the first entry that decides is the one
// named in the decision.
//
// # Shell rules
//
// [Policy.Shell] decides an exec argv (no shell is involved: its words are taken as they
// are) and [Policy.ShellScript] a shell script, parsed as bash. Every simple command is
// found and decided on its own: commands in pipelines, in && || ; lists, in subshells
// and { } groups, in if/while/for/case, in function bodies, in $(…), `…`, <(…) and >(…),
// in the script of sh -c / bash -c / dash -c (and zsh, ksh, ash, mksh: all shells are
// one program, "sh"), in here-documents and here-strings fed to a shell, in trap
// actions, and behind wrappers that run their arguments as a command (command, builtin,
// exec, env, nice, nohup, setsid, stdbuf, timeout, time, sudo, doas, su -c, xargs,
// busybox, chroot, ionice, taskset, flock, watch, find -exec/-execdir/-ok; sudo -s,
// sudo -i, doas -s and su without a command run a shell, "sh"). Nesting is
// followed to a bounded depth; deeper is undecidable. Both the wrapper and the command
// it runs are decided. A script is allowed only when every command in it is.
//
// Words are evaluated as the shell would before matching: quotes are removed
// ("rm", r""m and \rm are all rm), brace expansion is done ({rm,-rf,/} is rm -rf /), and a
// program is known by its base name (/bin/rm is rm). A word whose value depends on the
// run — a parameter ($X), a command substitution, an arithmetic expansion, a tilde,
// $'…' — is not literal.
//
// When the policy has shell rules (a deny list, an allow list or both), these are
// denied as undecidable: a command whose name is not literal ($CMD args,
// "$(echo rm)" -rf /) or is a glob (/bin/r?); eval, source and .; fc; alias
// definitions; hash -p; mapfile -C; sh -c, trap, su -c, flock -c or env -S with a string
// that is not literal; a shell or wrapper given a non-literal word where its options
// go, or an option it does not know (it may take a value, and the command would start
// elsewhere); find with a word that could be -exec; bash builtins that take variable
// names (read, printf -v, unset, declare, test -v …) given a subscript with a
// substitution in it; assignments to prompt variables (PS0–PS4, PROMPT_COMMAND) whose
// value could run code; a script that does not parse or is over 256KiB; and, in one
// decision, more than 1000 commands, code in code (sh -c in sh -c, a wrapper's command)
// deeper than 8 levels, or statements nested deeper than 200. When the policy
// has no shell rules, every command is allowed, these included, with the rule "shell"
// and the reason "no shell rules": there is nothing to decide against.
//
// A deny pattern is itself parsed as shell: one simple command, or a pipeline of them.
//
//   - The program name matches by base name, shells being one program ("sh" matches
//     bash, dash, zsh, …).
//   - A word starting with "-" (before a "--") is an option. Short options are letters
//     in any spelling: -rf, -fr, -r -f and -Rf all give {r, f}. Long options match
//     their known short equivalents for a few programs (rm: --recursive = -r = -R,
//     --force = -f; cp, mv, chmod, chown, chgrp, git likewise), and any unambiguous
//     abbreviation (--recu). The command must have at least the pattern's options,
//     anywhere in its words (GNU tools accept options after operands). Clusters are
//     read as letters whatever the program, so a pattern for a single-dash long option
//     (find -delete) also matches clusters with those letters: deny patterns err on the
//     side of matching.
//   - The other words are operands: the command must contain them in the same order,
//     with anything between (rm -rf /tmp/x / matches rm -rf /). So a pattern for a
//     subcommand holds when global options come first (git -C dir push --force matches
//     "git push --force"), at the price of also matching git log push -f. A bare *
//     means "any arguments" and requires none; a word with * ? or […] is a glob (path.Match);
//     quoted glob characters are literal. Operands compare after path cleaning, so /
//     also matches //, /., /tmp/.., and a command's glob that expands to the operand
//     or to its entries (/*, /[a-z]*) matches it too.
//   - A pipeline pattern "a | b" matches when a command matching a feeds a later
//     command matching b: an earlier stage of the same pipeline (curl x | tee f | sh),
//     a stage of an enclosing pipeline (curl x | (cat | bash)), or a substitution in the
//     later command's words or input (bash <(curl x), sh < <(curl x)). The denial is
//     reported on the last command.
//   - A command whose arguments are not all literal is denied when those arguments
//     could complete a match: rm -rf "$DIR" is denied by "rm -rf /" (DIR could be /),
//     rm -rf "$DIR/build" and rm -rf "./$DIR" are not (whatever DIR is, neither is /).
//     An unquoted expansion may be any number of words, so rm $F is denied too. The
//     arguments xargs adds are not literal (echo / | xargs rm -rf is denied); find's {}
//     is not literal either, but starts with find's one starting point, so find build
//     -exec rm -rf {} + is allowed and find / -exec rm -rf {} + is not.
//
// What deny patterns do not see, by design: the contents of files (curl x > f; sh f
// is not matched by "curl * | sh": the pipe is gone), code in other languages
// (python -c, node -e, perl -e), the working directory (cd / && rm -rf * is not rm -rf
// /), programs that delete by themselves (find / -delete is matched only by a pattern
// for find), wrappers not listed above, and the contents of variables (bash evaluates
// array subscripts found in a variable's value; a value set elsewhere is not seen).
// A deny list is a list of known-bad shapes; allow_prefixes is the mode that holds
// against what nobody thought of.
//
// What a command reads on its standard input is not in its words. [StdinShell] says when
// an argv runs a shell that reads its commands from there (sh, bash -i, env bash, sudo
// -s): a caller holding all of that input decides it as a script with
// [Policy.ShellScript]; a session whose input arrives while it runs (an interactive
// shell) is decided by [Policy.Interactive], denied with shell rules unless the policy
// says shell.interactive: allow, since its commands cannot be decided before they run.
// [Policy.ShellEnv] decides the environment an exec adds: BASH_FUNC_name%% (a function
// that replaces a command) and prompt variables holding a substitution are undecidable.
//
// Under shell rules an exec's environment is an allowlist ([Policy.GatedEnv], [GatedEnv]):
// terminal, colour and locale names, and those shell.env lists. Names that bring code into
// a program that does not name it (the loader's, a shell's, an interpreter's, a tool's
// configuration and helpers) are refused even when listed, and a policy that lists one
// does not load. The command line cannot set them either ([AssignCode]): an assignment
// before a command, export or declare, or env NAME=VALUE of such a name is undecidable,
// for the shell rules and for [Programs].
//
// [Programs] lists, by the same scan and without a policy, the programs an argv runs
// (builtins a shell runs itself left out), for the exec: resources of a capability token,
// and refuses what the shell rules call undecidable.
//
// An allow prefix is a list of literal words: a command is allowed when its first words
// are exactly the prefix's (program by base name, shells being one): "npm run" allows
// npm run build, not npm install; "go" allows go test, not gofmt. Every command must
// start with some prefix,
// builtins included (cd, echo, true must be listed to be used); a wrapper and the command
// it runs must both be allowed (nice go test needs "nice" and "go"). A function's body is
// decided command by command, and a call to it is decided like any command, by its
// name: whether the name means the function when the call runs (it may be defined
// later, conditionally, or unset) is not decidable from the text. A prefix word that
// meets a non-literal word in the command is undecidable.
//
// # File rules
//
// [Policy.File] decides an operation on a path. The path is cleaned lexically and resolved
// against files.jail: relative paths are joined to the jail; absolute paths, and relative
// ones whose ".." climb out, must still be inside it. Empty paths, paths with a NUL byte
// and paths longer than 4096 bytes are refused. The decision is on the path it is given:
// symbolic links are resolved where the action happens (the agent), which must pass the
// resolved path here and act on that path (openat2 RESOLVE_BENEATH or equivalent).
//
// files.deny_write is a list of globs relative to the jail: * ? and […] match within one
// path segment, ** matches any number of segments (zero included). As in .gitignore, a
// pattern without a "/" matches at any depth (.env protects a/b/.env) and one with a "/"
// is anchored at the jail (.git/hooks/**). A pattern that matches a directory protects
// everything under it, and deleting a directory that holds a path an anchored pattern
// protects is refused (deleting .git is refused under .git/hooks/**). Write, Create,
// Mkdir and Delete are checked against deny_write; Read is not. allowed_extensions and
// max_file_size apply to Write and Create (files being written): a name must end with one
// of the extensions (case-sensitive), and size is the file's size after the write (a
// negative size, unknown, is refused when there is a limit). Writing or deleting the
// jail itself is refused. files.jail is required in a files section; without a files
// section every well-formed path is allowed.
//
// # Network rules
//
// [Policy.Host] decides a host name. It is normalised first — lower-cased, one trailing
// dot removed, internationalised names converted to their A-label (xn--…) form — and a
// malformed name is refused: an internationalised name not in canonical form (one that
// lookup mapping would change: a zero-width space, a decomposed ü, a full-width dot),
// an invalid xn-- label, a NUL byte, spaces or control characters, a port or other
// URL syntax, empty or over-long labels (over 63 bytes) or names (over 253), a leading or
// trailing hyphen, and names whose last label is numeric (127.1, 0x7f.1: what a
// resolver would take for an address). Then network.deny, network.allow and
// network.default decide in that order. "*.example.com" matches every name under
// example.com, at any depth, and not example.com itself: list both to mean both. IP
// addresses (v4 or v6, bracketed or not) are decided by the lists only where listed
// literally (after unmapping ::ffff:a.b.c.d); wildcards never match them; otherwise the
// default applies. network.default is deny when not given, and default: allow with an
// allow list is a contradiction rejected at load. network.require_capability: true makes
// the egress proxy ask every connection for a net: capability token that allows its host
// as well ([Policy.RequiresNetCapability]; a host decision that allows carries it, as
// [Decision.RequireCapability]): the rules say what may ever be reached, the
// tokens what may be now, for as long as they are valid and not revoked.
//
// # Resources
//
// resources sets memory (a size: 512M, 1GiB, 1048576; units are binary, so 100MB is
// 100MiB, as everywhere in paddock), cpus (fractional), pids, timeout (a Go duration),
// tmp (the size of the sandbox's /tmp, a tmpfs whose pages count as its memory) and
// file_size (the largest file a command may write: RLIMIT_FSIZE, so a write past it fails
// and SIGXFSZ ends the process that made it; files.max_file_size is the file API's own,
// separate bound) and disk (the sandbox's workspace and /tmp together on disk: a write past
// it fails with ENOSPC), exposed as [Resources] by [Policy.Resources]; applying them is
// the runner's job.
//
// # Loading
//
// [Load] rejects a file with an unknown key, a wrong type, an invalid glob, size or
// duration, or a contradiction, with a [*LoadError] that names the line and the field:
//
//	policy.yaml:7: files.deny_write[2]: invalid glob "[": syntax error in pattern
//
// Contradictions are rules that cannot mean what they say: default: allow with an
// allow list, a deny_write pattern outside the jail or climbing out of it with "..",
// an allowed extension without its dot, a pattern for shell.deny that is a list (a; b,
// a && b) rather than a command or pipeline, a limit of zero. The same entry in an
// allow and a deny list is not a contradiction: deny wins. YAML aliases are refused (a
// policy is short; aliases only hide what it says), and so is a file over 1MiB.
//
// # What it does not do
//
// The engine decides; it does not enforce, log or resolve. Recording decisions in the
// audit log, resolving symbolic links before File, resolving host names (and refusing
// loopback, private and metadata addresses) before connecting, and applying Resources
// are for the agent, the egress proxy and the runner. Capability tokens are another
// layer.
package policy
