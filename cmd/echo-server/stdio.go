package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// maxLine bounds one stdio message. A longer line is discarded and answered with a parse
// error.
const maxLine = 16 << 20

// stdioBufferSize is the size of the stdio read and write buffers.
const stdioBufferSize = 64 << 10

// errLineTooLong reports a line longer than maxLine.
var errLineTooLong = errors.New("message too long")

// serveStdio answers newline-delimited JSON-RPC messages read from r on w, in order
// (mcp-notes §3), until r ends; it returns nil at EOF. Output is buffered and flushed
// whenever no more input is buffered, so pipelined requests are answered in few writes.
func serveStdio(s *server, r io.Reader, w io.Writer) error {
	br := bufio.NewReaderSize(r, stdioBufferSize)
	bw := bufio.NewWriterSize(w, stdioBufferSize)
	var long []byte // holds lines longer than the read buffer
	for {
		if br.Buffered() == 0 && bw.Buffered() > 0 {
			// About to block for input: send what has been answered so far.
			if err := bw.Flush(); err != nil {
				return err
			}
		}
		line, err := readLine(br, &long)
		tooLong := errors.Is(err, errLineTooLong)
		if len(line) > 0 || tooLong {
			// AvailableBuffer lets the answer be built in place in bw's buffer.
			out := bw.AvailableBuffer()
			if tooLong {
				out = appendError(out, nil, codeParseError, "message too long")
			} else {
				out = s.handleLine(out, line)
			}
			if len(out) > 0 {
				out = append(out, '\n')
				if _, werr := bw.Write(out); werr != nil {
					return werr
				}
			}
		}
		switch {
		case err == io.EOF:
			return bw.Flush()
		case err != nil && !tooLong:
			return err
		}
	}
}

// handleLine appends the answer to one stdio message to dst; it appends nothing for
// notifications and responses.
func (s *server) handleLine(dst, line []byte) []byte {
	m, err := parse(line)
	switch {
	case err != nil:
		return appendParseError(dst, err)
	case m.isNotification():
		return dst
	}
	return s.respond(dst, &m)
}

// readLine returns the next line without its line ending and surrounding space. The line
// aliases br's buffer, or *long for lines longer than that buffer, and is valid until the
// next call. At the end of input it returns the last unterminated line, if any, with
// io.EOF. A line longer than maxLine is skipped and reported as errLineTooLong.
func readLine(br *bufio.Reader, long *[]byte) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		buf := append((*long)[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = br.ReadSlice('\n')
			if len(buf) <= maxLine {
				buf = append(buf, line...)
			}
		}
		*long = buf
		if len(buf) > maxLine {
			if len(*long) > 2*stdioBufferSize {
				*long = nil // do not keep a huge buffer
			}
			return nil, errLineTooLong
		}
		line = buf
	}
	return bytes.TrimSpace(line), err
}
