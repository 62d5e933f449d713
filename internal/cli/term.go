package cli

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// terminal returns r's file descriptor when r is a terminal.
func terminal(r any) (int, bool) {
	f, ok := r.(*os.File)
	if !ok || f == nil {
		return -1, false
	}
	fd := int(f.Fd())
	if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
		return -1, false
	}
	return fd, true
}

// isTerminal says whether r is a terminal.
func isTerminal(r io.Reader) bool {
	_, ok := terminal(r)
	return ok
}

// makeRaw puts the terminal fd in raw mode, as cfmakeraw(3) does, and returns the
// function that restores it.
func makeRaw(fd int) (restore func(), err error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN] = 1
	raw.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

// noEcho turns the terminal's echo off (for a password) and returns the function that
// turns it back on.
func noEcho(fd int) (restore func(), err error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	quiet := *old
	quiet.Lflag &^= unix.ECHO
	quiet.Lflag |= unix.ICANON | unix.ISIG
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &quiet); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

// windowSize is the terminal's size; 24×80 when it cannot be read.
func windowSize(fd int) (rows, cols uint32) {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil || ws.Row == 0 || ws.Col == 0 {
		return 24, 80
	}
	return uint32(ws.Row), uint32(ws.Col)
}
