package sandbox

import (
	"bufio"
	"bytes"
	"os"
	"regexp"
	"strings"
)

var runtimeErrorMsg = regexp.MustCompile(`level=error msg="(.*)"`)

// LastLogError returns the last error line of an agent or OCI runtime log, so that a
// sandbox that would not start says why.
func LastLogError(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "no log"
	}
	var last string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if m := runtimeErrorMsg.FindStringSubmatch(line); m != nil {
			last = strings.ReplaceAll(m[1], `\"`, `"`)
		} else if strings.HasPrefix(line, "paddock-agent: ") || strings.Contains(line, "level=ERROR") {
			last = line
		}
	}
	if last == "" {
		return "it logged no error"
	}
	return last
}
