package kube

import (
	"errors"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// A template pool's name is paddock-tmpl-<template>, a DNS label; a template that would
// not make one is refused, naming the setting.
func TestTemplatePoolName(t *testing.T) {
	for _, tc := range []struct{ template, want string }{
		{"node", "paddock-tmpl-node"},
		{"static", "paddock-tmpl-static"},
		{"Node", ""},
		{"a_b", ""},
		{"-x", ""},
		{"", ""},
		{strings.Repeat("x", 51), ""},
	} {
		got, err := TemplatePoolName(tc.template)
		if tc.want == "" {
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "pool.templates."+tc.template) {
				t.Errorf("%q: %q, %v", tc.template, got, err)
			}
			continue
		}
		if got != tc.want || err != nil {
			t.Errorf("%q: %q, %v, want %q", tc.template, got, err, tc.want)
		}
	}
}
