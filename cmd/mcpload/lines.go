package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"slices"
)

// maxMessage bounds one answer: a stdio line, an SSE event's data, or a JSON body.
const maxMessage = 16 << 20

// errTooLong reports an answer longer than maxMessage.
var errTooLong = errors.New("answer longer than 16 MiB")

// readLine returns the next line from br without its line ending ("\n" or "\r\n"). The
// line aliases br's buffer, or *long for lines longer than that buffer, and is valid until
// the next call. At the end of input it returns the last unterminated line, if any, with
// io.EOF. A line longer than maxMessage is skipped and reported as errTooLong.
func readLine(br *bufio.Reader, long *[]byte) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		buf := append((*long)[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = br.ReadSlice('\n')
			if len(buf) <= maxMessage {
				buf = append(buf, line...)
			}
		}
		*long = buf
		if len(buf) > maxMessage {
			*long = nil // do not keep a huge buffer
			if err == nil {
				err = errTooLong
			}
			return nil, err
		}
		line = buf
	}
	line = bytes.TrimSuffix(line, []byte{'\n'})
	return bytes.TrimSuffix(line, []byte{'\r'}), err
}

// readAll reads r to its end into buf, reusing its capacity, and returns it. n is the
// declared length, or -1 when unknown.
func readAll(r io.Reader, n int64, buf []byte) ([]byte, error) {
	buf = buf[:0]
	if n > maxMessage {
		return buf, errTooLong
	}
	if n > 0 {
		buf = slices.Grow(buf, int(n)+1) // +1: room to see EOF without growing
	}
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, 4096)
		}
		k, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		switch {
		case len(buf) > maxMessage:
			return buf, errTooLong
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return buf, err
		}
	}
}
