// Package docs is paddock's documentation: README.md at the module's root and the pages
// in this directory. It holds no code; its test checks that every relative link between
// the pages leads to a file, and to a heading there when it names one.
package docs
