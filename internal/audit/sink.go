package audit

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// OpenSink opens the output of the audit trail that sink names, as the gateway's config
// does (the key audit.sink):
//
//   - "off": no output. OpenSink returns nil and no error; keep a nil *Log.
//   - "stdout": the process's standard output. Its Close does nothing, so that stdout stays
//     open for whatever else writes there.
//   - "file": the file at path, appended to, and created if absent with mode 0600: records
//     name principals and what they did, which is for the gateway's own user to read. An
//     existing file keeps its mode.
//
// The caller closes the result after closing the Log that writes to it.
func OpenSink(sink, path string) (io.WriteCloser, error) {
	switch sink {
	case "off":
		return nil, nil
	case "stdout":
		return nopCloser{os.Stdout}, nil
	case "file":
		if path == "" {
			return nil, errors.New("open audit file: no path: set the file to append audit records to")
		}
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			// The message names the path once; the cause still matches fs.ErrNotExist and
			// the like with errors.Is.
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, fmt.Errorf("open audit file %s: %w (check that its directory exists and the gateway's user may write there)", path, err)
		}
		return f, nil
	}
	return nil, fmt.Errorf("open audit sink: %q is not a sink: use off, stdout or file", sink)
}

// nopCloser is a writer whose Close does nothing, for outputs the audit trail does not own.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
