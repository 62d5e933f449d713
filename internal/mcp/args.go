package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK checks a tool's arguments against its input schema before the tool runs, and
// answers a mismatch with the validator's own words ("validating \"arguments\":
// validating root: validating /properties/timeout_seconds: maximum: 9999/1 is greater
// than 600.000000"). preciseArguments says the same for a model: which argument, what
// is wrong with it, and what the tool takes. The patterns are compiled on the first
// mismatch, not at every start of the CLI, which links this package.
var schemaPatterns = sync.OnceValue(func() (p struct{ property, required, extra, bound, minItems, minLen, typ *regexp.Regexp }) {
	p.property = regexp.MustCompile(`.*validating /properties/([^/:]+)(/items(?:/\d+)?)?: (.*)$`)
	p.required = regexp.MustCompile(`required: missing properties: (\[.*\])$`)
	p.extra = regexp.MustCompile(`unexpected additional properties (\[.*\])$`)
	p.bound = regexp.MustCompile(`^(maximum|minimum): (-?\d+)(?:/1)? is (?:greater|less) than (-?\d+)(?:\.0+)?$`)
	p.minItems = regexp.MustCompile(`^minItems: array length (\d+) is less than (\d+)$`)
	p.minLen = regexp.MustCompile(`^minLength: .* contains (\d+) Unicode code points, fewer than (\d+)$`)
	p.typ = regexp.MustCompile(`^type: .* has type "(\w+)", want (.+)$`)
	return p
})

const schemaPrefix = `validating "arguments": `

func (t *tools) preciseArguments(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		res, err := next(ctx, method, req)
		p, ok := req.GetParams().(*sdk.CallToolParamsRaw)
		r, isResult := res.(*sdk.CallToolResult)
		if method != "tools/call" || err != nil || !ok || p == nil || !isResult || r == nil || !r.IsError || len(r.Content) != 1 {
			return res, err
		}
		if tc, ok := r.Content[0].(*sdk.TextContent); ok && strings.HasPrefix(tc.Text, schemaPrefix) {
			r.Content = []sdk.Content{&sdk.TextContent{Text: argumentError(p.Name, t.args[p.Name], tc.Text)}}
		}
		return res, err
	}
}

// argumentError is msg, the SDK's schema validation error of tool's arguments, as a model
// best acts on it. args are the tool's arguments.
func argumentError(tool string, args []string, msg string) string {
	takes := fmt.Sprintf("%s takes %s", tool, strings.Join(args, ", "))
	if len(args) == 0 {
		takes = tool + " takes no arguments"
	}
	var what string
	pat := schemaPatterns()
	switch {
	case pat.required.MatchString(msg):
		what = "missing required argument " + quoteList(pat.required.FindStringSubmatch(msg)[1])
	case pat.extra.MatchString(msg):
		what = "unknown argument " + quoteList(pat.extra.FindStringSubmatch(msg)[1]) + "; " + takes
	case pat.property.MatchString(msg):
		m := pat.property.FindStringSubmatch(msg)
		name := m[1]
		item := ""
		if m[2] != "" {
			item = "an item: "
			if i := strings.TrimPrefix(m[2], "/items/"); i != m[2] {
				item = "item " + i + ": "
			}
		}
		what = fmt.Sprintf("argument %q: %s%s", name, item, detail(m[3]))
	case strings.Contains(msg, "unmarshaling arguments"):
		what = "the arguments are not a JSON object of named arguments; " + takes
	default:
		what = strings.TrimPrefix(msg, schemaPrefix) + "; " + takes
	}
	return "invalid argument: " + what + " (validating against " + tool + "'s input schema, which gives each argument's type and bounds; fix the argument named)"
}

// detail is what the validator said of one value, in plainer words.
func detail(d string) string {
	pat := schemaPatterns()
	if m := pat.bound.FindStringSubmatch(d); m != nil {
		if m[1] == "maximum" {
			return fmt.Sprintf("%s is more than its maximum, %s", m[2], m[3])
		}
		return fmt.Sprintf("%s is less than its minimum, %s", m[2], m[3])
	}
	if m := pat.minItems.FindStringSubmatch(d); m != nil {
		return fmt.Sprintf("%s items, want at least %s", m[1], m[2])
	}
	if m := pat.minLen.FindStringSubmatch(d); m != nil {
		return fmt.Sprintf("%s characters, want at least %s", m[1], m[2])
	}
	if m := pat.typ.FindStringSubmatch(d); m != nil {
		return fmt.Sprintf("a value of type %s, want %s", m[1], m[2])
	}
	return d
}

// quoteList is a JSON list of names as `"a", "b"`.
func quoteList(list string) string {
	var names []string
	if err := json.Unmarshal([]byte(list), &names); err != nil || len(names) == 0 {
		return list
	}
	for i, n := range names {
		names[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(names, ", ")
}
