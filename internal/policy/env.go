package policy

import (
	"fmt"
	"slices"
	"strings"
)

// The environment of a gated exec: one whose programs a capability token or a policy's
// shell rules limit. Its env may set only the names of a fixed safe set and those the
// policy lists (shell.env); every other name is refused, so that no variable brings code
// the grant does not name: the dynamic loader's (LD_PRELOAD), a shell's start-up files and
// functions (BASH_ENV, BASH_FUNC_…), an interpreter's options and paths (PYTHONPATH,
// NODE_OPTIONS), a tool's configuration or helpers (HOME, GIT_CONFIG_…, PAGER).

// safeEnv are the names any gated exec may set: terminal, colour and locale settings.
// Their values are checked too (see safeValue): a locale or time zone named by a path
// would make the C library read a file the caller chose.
var safeEnv = map[string]bool{
	"TERM": true, "COLORTERM": true, "NO_COLOR": true, "FORCE_COLOR": true, "CLICOLOR": true,
	"CLICOLOR_FORCE": true, "COLUMNS": true, "LINES": true, "LANG": true, "LANGUAGE": true,
	"TZ": true, "CI": true, "SOURCE_DATE_EPOCH": true,
}

// SafeEnvNames are the names every gated exec may set, sorted; LC_* names too.
func SafeEnvNames() []string {
	names := make([]string, 0, len(safeEnv)+1)
	for n := range safeEnv {
		names = append(names, n)
	}
	slices.Sort(names)
	return append(names, "LC_*")
}

// envClass says why a name can bring code into a program that does not name it, and
// the rule that refuses it; "" for a name of no known class. These names are refused
// even when a policy lists them.
func envClass(name string) (rule, why string) {
	up := strings.ToUpper(name)
	switch {
	case benignEnv[up]:
		return "", ""
	case strings.HasPrefix(up, "LD_") || loaderEnv[up] || strings.HasPrefix(up, "MALLOC_") || strings.HasPrefix(up, "GLIBC_"):
		return "env.loader", "the dynamic loader or the C library reads it: it can load a library or data file the caller chose into any program"
	case strings.HasPrefix(name, "BASH_FUNC_") || shellEnv[up] || isPromptVar(up):
		return "env.shell", "a shell runs code from it, or from a file it names, before or around the command"
	case hasAnyPrefix(up, interpreterPrefixes):
		return "env.interpreter", "an interpreter or compiler reads options, code or a module path from it"
	case configEnv[up] || hasAnyPrefix(up, configPrefixes):
		return "env.config", "it points a program at configuration, a helper or a path it executes"
	}
	return "", ""
}

// benignEnv are names of a class's prefix that only select a mode, and name no code or
// file: a policy may list them in shell.env, and a command line may set them.
var benignEnv = map[string]bool{
	"NODE_ENV": true, "CGO_ENABLED": true, "GOOS": true, "GOARCH": true, "GOAMD64": true, "GOARM": true,
	"GOARM64": true, "GO386": true, "GOWASM": true, "GOEXPERIMENT": true, "GOMAXPROCS": true,
	"RUST_BACKTRACE": true, "RUST_LOG": true, "CARGO_TERM_COLOR": true, "PYTHONUNBUFFERED": true,
	"PYTHONDONTWRITEBYTECODE": true, "PYTHONHASHSEED": true, "PYTHONIOENCODING": true, "PYTHONUTF8": true,
}

// loaderEnv are the C library's variables that name files it loads (glibc's unsecure
// variables, which it drops for setuid programs, and a few more).
var loaderEnv = map[string]bool{
	"GCONV_PATH": true, "GETCONF_DIR": true, "HOSTALIASES": true, "LOCALDOMAIN": true, "LOCPATH": true,
	"NIS_PATH": true, "NLSPATH": true, "RESOLV_HOST_CONF": true, "RES_OPTIONS": true, "TMPDIR": true,
	"TZDIR": true, "MEMUSAGE_OUTPUT": true, "SEGFAULT_OUTPUT_NAME": true, "SEGFAULT_SIGNALS": true,
}

var shellEnv = map[string]bool{
	"BASH_ENV": true, "ENV": true, "SHELLOPTS": true, "BASHOPTS": true, "PROMPT_COMMAND": true,
	"CDPATH": true, "GLOBIGNORE": true, "BASH_XTRACEFD": true, "BASH_LOADABLES_PATH": true,
	"BASH_COMPAT": true, "HISTFILE": true, "HISTCONTROL": true, "INPUTRC": true, "ZDOTDIR": true,
	"PATH": true, "SHELL": true, "EXECIGNORE": true, "POSIXLY_CORRECT": true, "FPATH": true,
}

func isPromptVar(name string) bool {
	return promptVars[name] || strings.HasPrefix(name, "PS")
}

var interpreterPrefixes = []string{
	"PYTHON", "NODE_", "NPM_", "YARN_", "PNPM_", "BUN_", "DENO_", "PERL", "RUBY", "GEM_", "BUNDLE_",
	"JAVA_", "_JAVA_", "JDK_", "CLASSPATH", "LUA_", "PHP", "TCL", "GO", "CGO_", "CARGO", "RUST",
	"CC", "CXX", "CPP", "CFLAGS", "LDFLAGS", "PKG_CONFIG", "MAKE", "GNUMAKE", "DOTNET_", "COREHOST_",
	"R_", "JULIA_", "ERL_", "ELIXIR_", "GHC", "OCAML", "GUILE_", "EMACS", "VIM", "MYVIMRC", "EXINIT",
}

var configEnv = map[string]bool{
	"HOME": true, "USER": true, "LOGNAME": true, "PAGER": true, "EDITOR": true, "VISUAL": true,
	"MANPAGER": true, "MANOPT": true, "LESS": true, "LESSOPEN": true, "LESSCLOSE": true, "LESSKEY": true,
	"OPENSSL_CONF": true, "OPENSSL_ENGINES": true, "OPENSSL_MODULES": true, "SSL_CERT_FILE": true,
	"SSL_CERT_DIR": true, "CURL_HOME": true, "WGETRC": true, "TERMINFO": true, "TERMINFO_DIRS": true,
	"TERMCAP": true, "MAGIC": true, "PWD": true, "OLDPWD": true, "TAR_OPTIONS": true, "GREP_OPTIONS": true,
	"ZIPOPT": true, "UNZIP": true, "GZIP": true, "XZ_OPT": true, "BZIP2": true, "TMP": true, "TEMP": true,
	"LD": true, "AR": true, "AS": true, "NM": true, "STRIP": true, "OBJCOPY": true, "RANLIB": true,
	"BROWSER": true, "DISPLAY": true, "WAYLAND_DISPLAY": true, "DBUS_SESSION_BUS_ADDRESS": true,
	"SHLVL": true, "MAIL": true, "MAILPATH": true, "XAUTHORITY": true,
}

var configPrefixes = []string{
	"XDG_", "GIT_", "SSH_", "GPG", "GNUPG", "SUDO_", "DOCKER_", "KUBE", "AWS_", "GOOGLE_", "AZURE_",
	"HTTP_", "HTTPS_", "FTP_", "ALL_PROXY", "NO_PROXY", "PIP_", "UV_", "POETRY_", "CONDA", "VIRTUAL_ENV",
	"HG", "SVN", "EMAIL", "PADDOCK_", "SYSTEMD_", "DEBUGINFOD_", "ELFUTILS_", "QT_", "GTK_", "GDK_",
	"FONTCONFIG_", "GST_", "LIBGL_", "MESA_", "VK_", "__EGL", "GBM_", "PULSE_", "SDL_", "LIBVA_",
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// EnvError is an env entry a gated exec may not set: its index, its name and the rule.
type EnvError struct {
	Index int
	Name  string
	// Rule is env.loader, env.shell, env.interpreter or env.config for a name of a known
	// class, env.allowlist for any other name not allowed, env.value for an allowed name
	// whose value names a file.
	Rule   string
	Reason string
}

func (e *EnvError) Error() string {
	return fmt.Sprintf("env[%d]: %s is refused for an exec whose programs are limited (rule %s): %s", e.Index, e.Name, e.Rule, e.Reason)
}

// GatedEnv checks the environment a gated exec adds: each name must be one of the safe
// set or match one of allowed (shell.env: an exact name, or a prefix ending in "*"), and
// no name of a known class ([envClass]) is allowed by any list. It returns the first entry
// refused, as an *EnvError, or nil.
func GatedEnv(env, allowed []string) error {
	for i, kv := range env {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return &EnvError{Index: i, Name: name, Rule: "env.allowlist", Reason: "want NAME=VALUE"}
		}
		if rule, why := envClass(name); rule != "" {
			return &EnvError{Index: i, Name: name, Rule: rule, Reason: why}
		}
		switch {
		case safeEnv[name] || strings.HasPrefix(name, "LC_"):
			if why := safeValue(name, val); why != "" {
				return &EnvError{Index: i, Name: name, Rule: "env.value", Reason: why}
			}
		case matchEnvName(allowed, name):
		default:
			return &EnvError{Index: i, Name: name, Rule: "env.allowlist", Reason: fmt.Sprintf(
				"only %s and the names the policy lists in shell.env may be set", strings.Join(SafeEnvNames(), ", "))}
		}
	}
	return nil
}

// safeValue says why a safe name's value is refused, or "": a locale or time zone given
// as a path makes the C library read that file.
func safeValue(name, val string) string {
	switch {
	case name == "TZ" && (strings.HasPrefix(strings.TrimPrefix(val, ":"), "/") || strings.Contains(val, "..")):
		return "a time zone given as a path makes the C library read that file; name a zone, like Europe/Paris"
	case (name == "LANG" || name == "LANGUAGE" || strings.HasPrefix(name, "LC_")) && strings.ContainsRune(val, '/'):
		return "a locale given as a path makes the C library read that file; name a locale, like C.UTF-8"
	}
	return ""
}

func matchEnvName(allowed []string, name string) bool {
	for _, a := range allowed {
		if p, ok := strings.CutSuffix(a, "*"); ok && strings.HasPrefix(name, p) || a == name {
			return true
		}
	}
	return false
}

// AssignCode says why a command line's assignment of name (NAME=VALUE before a command,
// export, declare, env NAME=VALUE) brings code the command line does not name, or "".
func AssignCode(name string) string {
	if rule, why := envClass(name); rule != "" {
		return fmt.Sprintf("%s= in the command line: %s (rule %s)", name, why, rule)
	}
	return ""
}

// checkEnvName checks an entry of shell.env: an environment name, or a prefix of one
// ending in "*", of no class that brings code.
func checkEnvName(s string) error {
	name := strings.TrimSuffix(s, "*")
	if name == "" {
		return fmt.Errorf("want a variable name like MY_SETTING, or a prefix like MY_APP_*")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return fmt.Errorf("%q is not a variable name: letters, digits and '_', not starting with a digit", s)
		}
	}
	if rule, why := envClass(name); rule != "" {
		return fmt.Errorf("%s cannot be allowed (rule %s): %s", s, rule, why)
	}
	if strings.HasSuffix(s, "*") {
		// A prefix must not reach a name of a known class either (LD* reaches LD_PRELOAD).
		for _, probe := range []string{"_PRELOAD", "PATH", "_OPTIONS", "OPT", "_CONFIG", "ENV"} {
			if rule, _ := envClass(name + probe); rule != "" {
				return fmt.Errorf("%s would allow %s%s (rule %s): list the names one by one", s, name, probe, rule)
			}
		}
	}
	return nil
}
