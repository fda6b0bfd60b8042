package windowspec

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCalendarDay(t *testing.T) {
	pacific, err := time.LoadLocation("America/Los_Angeles")
	require.NoError(t, err)
	tests := []struct {
		name       string
		now        time.Time
		hour       int
		start, end time.Time
	}{
		{"midday", time.Date(2026, 3, 5, 12, 0, 0, 0, pacific), 0,
			time.Date(2026, 3, 5, 0, 0, 0, 0, pacific), time.Date(2026, 3, 6, 0, 0, 0, 0, pacific)},
		{"before the reset hour", time.Date(2026, 3, 5, 1, 0, 0, 0, pacific), 2,
			time.Date(2026, 3, 4, 2, 0, 0, 0, pacific), time.Date(2026, 3, 5, 2, 0, 0, 0, pacific)},
		{"day of 23 hours", time.Date(2026, 3, 8, 12, 0, 0, 0, pacific), 0,
			time.Date(2026, 3, 8, 0, 0, 0, 0, pacific), time.Date(2026, 3, 9, 0, 0, 0, 0, pacific)},
		{"at the reset", time.Date(2026, 3, 5, 0, 0, 0, 0, pacific), 0,
			time.Date(2026, 3, 5, 0, 0, 0, 0, pacific), time.Date(2026, 3, 6, 0, 0, 0, 0, pacific)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start, end := CalendarDay(tt.now.UTC(), tt.hour, pacific)
			assert.True(t, start.Equal(tt.start), "start = %v, want %v", start, tt.start)
			assert.True(t, end.Equal(tt.end), "end = %v, want %v", end, tt.end)
		})
	}
	start, end := CalendarDay(time.Date(2026, 3, 8, 12, 0, 0, 0, pacific), 0, pacific)
	assert.Equal(t, 23*time.Hour, end.Sub(start))
}

func TestWidthsCoverTheSpans(t *testing.T) {
	assert.GreaterOrEqual(t, (MinuteBuckets-1)*MinuteWidth, MinuteSpan)
	assert.GreaterOrEqual(t, (DayBuckets-1)*DayWidth, DaySpan)
	assert.Equal(t, 750*time.Millisecond, MinuteWidth)
	assert.Equal(t, time.Hour, DayWidth)
}

func TestTighter(t *testing.T) {
	for _, c := range []struct{ a, b, want int64 }{{0, 0, 0}, {0, 5, 5}, {5, 0, 5}, {3, 5, 3}, {5, 3, 3}} {
		assert.Equal(t, c.want, Tighter(c.a, c.b), "Tighter(%d, %d)", c.a, c.b)
	}
}

func TestCheckModel(t *testing.T) {
	tests := []struct {
		name, model, err string
	}{
		{"ascii", "gpt-4o-mini", ""},
		{"empty", "", ""},
		{"utf-8", "modèle-été", ""},
		{"at the bound", strings.Repeat("m", MaxModelName), ""},
		{"over the bound", strings.Repeat("m", MaxModelName+1), "a model name of 257 bytes is longer than 256"},
		{"a control character", "gpt\x07-4o", "control character at byte 3"},
		{"delete", "gpt-4o\x7f", "control character at byte 6"},
		{"a control character after utf-8", "modèle\x00", "control character at byte 7"},
		{"not utf-8", "gpt-\xff4o", "not UTF-8"},
		{"a cut rune", "modè"[:4], "not UTF-8"},
		{"a C1 control as UTF-8 is allowed", "a\u0085b", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckModel(tt.model)
			if tt.err == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.err)
		})
	}
}
