package metrics

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Series reads an exposition in the Prometheus text format, as the handler serves it, into
// the value of each series, keyed as Canonical writes it: counters and gauges by name,
// histograms as their _count and _sum. It is for checks of what a scrape shows, in tests and
// tools.
func Series(text io.Reader) (map[string]float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(text)
	if err != nil {
		return nil, fmt.Errorf("parse the exposition: %w", err)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := make([]string, 0, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			switch {
			case m.Counter != nil:
				out[key(name, labels)] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key(name, labels)] = m.Gauge.GetValue()
			case m.Untyped != nil:
				out[key(name, labels)] = m.Untyped.GetValue()
			case m.Histogram != nil:
				out[key(name+"_count", labels)] = float64(m.Histogram.GetSampleCount())
				out[key(name+"_sum", labels)] = m.Histogram.GetSampleSum()
			}
		}
	}
	return out, nil
}

// Canonical writes a series name{label="value",...} with its labels sorted by name, as
// Series keys it. Label values must not hold commas.
func Canonical(series string) string {
	name, rest, ok := strings.Cut(series, "{")
	if !ok {
		return series
	}
	rest = strings.TrimSuffix(rest, "}")
	if rest == "" {
		return name
	}
	return key(name, strings.Split(rest, ","))
}

func key(name string, labels []string) string {
	if len(labels) == 0 {
		return name
	}
	labels = slices.Clone(labels)
	slices.Sort(labels)
	return name + "{" + strings.Join(labels, ",") + "}"
}
