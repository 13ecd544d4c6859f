package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
	"time"
)

// sseEvent is one Server-Sent Event (the text/event-stream format of the HTML standard).
type sseEvent struct {
	ID    string
	Event string // "" means "message"
	Data  []byte
	// Retry is the reconnection delay the server asked for, or 0.
	Retry time.Duration
}

// errEventTooLarge is returned by sseReader.Next for an event over the size limit.
var errEventTooLarge = errors.New("SSE event exceeds the size limit")

// sseReader parses an event stream. It is not safe for concurrent use.
type sseReader struct {
	r   *bufio.Reader
	max int
}

func newSSEReader(r io.Reader, max int) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 32<<10), max: max}
}

// Next returns the next event. Comment lines are skipped; an event with no data (a priming
// event, or one that carries only an id or retry) is returned with empty Data, so the caller
// can record its id. At the end of the stream it returns io.EOF.
func (s *sseReader) Next() (sseEvent, error) {
	var ev sseEvent
	var data bytes.Buffer
	sawField := false
	for {
		line, err := s.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && sawField {
				// A final event without its blank line is not dispatched (HTML standard).
				return sseEvent{}, io.ErrUnexpectedEOF
			}
			return sseEvent{}, err
		}
		if len(line) == 0 {
			if !sawField {
				continue
			}
			ev.Data = data.Bytes()
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		sawField = true
		field, value, _ := bytes.Cut(line, []byte{':'})
		value = bytes.TrimPrefix(value, []byte{' '})
		switch string(field) {
		case "data":
			if s.max > 0 && data.Len()+len(value) > s.max {
				return sseEvent{}, errEventTooLarge
			}
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(value)
		case "event":
			ev.Event = string(value)
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				ev.ID = string(value)
			}
		case "retry":
			if ms, err := strconv.Atoi(string(value)); err == nil && ms >= 0 {
				ev.Retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
}

// readLine returns one line without its end (\n, \r\n or \r), bounded by the size limit.
func (s *sseReader) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		if s.max > 0 && len(line)+len(chunk) > s.max+64 {
			return nil, errEventTooLarge
		}
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if len(line) > 0 && errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		break
	}
	line = bytes.TrimSuffix(line, []byte{'\n'})
	line = bytes.TrimSuffix(line, []byte{'\r'})
	return line, nil
}
