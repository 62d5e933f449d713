package server_test

import (
	"bufio"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/wire"
)

// configDoc is the configuration reference; its tables are checked against the structs.
const configDoc = "../../docs/configuration.md"

// The sections of configDoc whose tables list a struct's keys.
const (
	serverSection = "## Every key"
	userSection   = "## Per-user files"
)

// TestConfigDoc checks docs/configuration.md against the configuration structs: every
// YAML key of `paddock serve`'s Config (the runner's inlined) and of the per-user file
// has a row with its type, no row names a key that no longer exists, and the rows marked
// *run* are exactly the runner's keys (what `paddock run --config` reads).
func TestConfigDoc(t *testing.T) {
	rows := docRows(t, configDoc)
	for _, c := range []struct {
		section string
		v       any
	}{
		{serverSection, server.Config{}},
		{userSection, runner.UserConfig{}},
	} {
		t.Run(strings.TrimPrefix(c.section, "## "), func(t *testing.T) {
			want := map[string]string{}
			configKeys(reflect.TypeOf(c.v), "", want)
			got := rows[c.section]
			if len(got) == 0 {
				t.Fatalf("%s: no table under %q", configDoc, c.section)
			}
			for _, k := range sortedKeys(want) {
				typ, ok := got[k]
				switch {
				case !ok:
					t.Errorf("%s, %s: key `%s` (%s) has no row; add one", configDoc, c.section, k, want[k])
				case typ != want[k]:
					t.Errorf("%s, %s: key `%s` is a %s, the doc says %q", configDoc, c.section, k, want[k], typ)
				}
			}
			for _, k := range sortedKeys(got) {
				if _, ok := want[k]; !ok {
					t.Errorf("%s, %s: row `%s` names no key of the configuration; remove it", configDoc, c.section, k)
				}
			}
		})
	}
	runKeys := map[string]string{}
	configKeys(reflect.TypeFor[runner.Config](), "", runKeys)
	for _, k := range sortedKeys(rows[serverSection]) {
		_, isRun := runKeys[k]
		if marked := runMarked[k]; marked != isRun {
			t.Errorf("%s: key `%s` is marked *run*: %v, but paddock run reads it: %v", configDoc, k, marked, isRun)
		}
	}
}

// runMarked holds the keys whose row says *run*, filled by docRows.
var runMarked = map[string]bool{}

// TestConfigDocExample loads the example at the top of docs/configuration.md as
// `paddock serve` would: an example that does not load teaches the wrong thing.
func TestConfigDocExample(t *testing.T) {
	b, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```yaml\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatalf("%s: no yaml example", configDoc)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(example), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := server.LoadConfig(path, t.TempDir(), ""); err != nil {
		t.Errorf("%s: the example does not load: %v", configDoc, err)
	}
}

// docRows reads, per "## " section, the table rows whose first cell is a `key`: key → type.
func docRows(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string]string{}
	clear(runMarked)
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			section = strings.TrimSpace(line)
			continue
		}
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			t.Fatalf("%s: row %q has fewer than key, type and default", path, line)
		}
		key := strings.Trim(strings.TrimSpace(cells[1]), "`")
		if out[section] == nil {
			out[section] = map[string]string{}
		}
		if _, dup := out[section][key]; dup {
			t.Errorf("%s, %s: key `%s` has two rows", path, section, key)
		}
		out[section][key] = strings.TrimSpace(cells[2])
		if section == serverSection && len(cells) > 4 && strings.HasPrefix(strings.TrimSpace(cells[4]), "*run*") {
			runMarked[key] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	sizeType     = reflect.TypeFor[wire.Size]()
)

// configKeys adds t's YAML keys under prefix to keys (key → type name): a struct field's
// key joined with a dot, an element of a list of structs with "[].", inline fields at
// their parent's level; fields tagged "-" are not configuration.
func configKeys(t reflect.Type, prefix string, keys map[string]string) {
	for f := range t.Fields() {
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if strings.Contains(opts, "inline") {
			configKeys(f.Type, prefix, keys)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		key := prefix + name
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Struct && ft != durationType:
			configKeys(ft, key+".", keys)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			configKeys(ft.Elem(), key+"[].", keys)
		default:
			keys[key] = typeName(ft)
		}
	}
}

// typeName is how configDoc names a leaf's type.
func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t == sizeType:
		return "size"
	case t.Kind() == reflect.Pointer:
		return typeName(t.Elem())
	case t.Kind() == reflect.Slice:
		return "list of " + typeName(t.Elem()) + "s"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int64, reflect.Uint32:
		return "integer"
	case reflect.Float64:
		return "number"
	}
	return t.String()
}

func sortedKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
