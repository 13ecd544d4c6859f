package docpage

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCompare(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "page.md")
	if err := os.WriteFile(page, []byte("# Page\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		got     string
		wantErr bool
	}{
		{"same", page, "# Page\n", false},
		{"different", page, "# Page\nmore\n", true},
		{"missing", filepath.Join(dir, "none.md"), "# Page\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := Compare(tt.path, []byte(tt.got)); (err != nil) != tt.wantErr {
				t.Errorf("Compare: %v, want an error: %v", err, tt.wantErr)
			}
		})
	}
}
