package keypool

import (
	"math"
	"testing"
)

func TestDefaultEstimate(t *testing.T) {
	tests := []struct {
		name string
		info RequestInfo
		want int64
	}{
		{"nothing stated reserves the default output", RequestInfo{}, 1024},
		{"one byte is a token", RequestInfo{PromptBytes: 1}, 1 + 1024},
		{"four bytes are a token", RequestInfo{PromptBytes: 4}, 1 + 1024},
		{"five bytes round up", RequestInfo{PromptBytes: 5}, 2 + 1024},
		{"stated output", RequestInfo{PromptBytes: 400, MaxOutput: 50}, 100 + 50},
		{"stated output capped", RequestInfo{MaxOutput: 100000}, 32768},
		{"images", RequestInfo{Images: 2, MaxOutput: 1}, 2000 + 1},
		{"all together", RequestInfo{PromptBytes: 4000, MaxOutput: 500, Images: 1}, 1000 + 500 + 1000},
		{"negatives count as zero", RequestInfo{PromptBytes: -9, MaxOutput: -9, Images: -9}, 1024},
		{"huge prompt", RequestInfo{PromptBytes: math.MaxInt64, MaxOutput: 1}, math.MaxInt64/4 + 1 + 1},
		{"huge image count saturates", RequestInfo{Images: math.MaxInt}, math.MaxInt64},
		{"sum saturates", RequestInfo{Images: math.MaxInt64 / 1000, MaxOutput: 32768}, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DefaultEstimate(tt.info); got != tt.want {
				t.Errorf("DefaultEstimate(%+v) = %d, want %d", tt.info, got, tt.want)
			}
		})
	}
}

// TestDefaultEstimateOfRequest estimates a request from its body, as the
// pool does.
func TestDefaultEstimateOfRequest(t *testing.T) {
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":300,"messages":[{"role":"user","content":[` +
		`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},` +
		`{"type":"text","text":"What does this chart show about revenue?"}]}]}`)
	// Prompt: "user" 4 + "base64" 6 + "text" 4 + the question 40 = 54 bytes,
	// 14 tokens; 300 reserved; one image.
	if got, want := DefaultEstimate(scanRequest(body, nil)), int64(14+300+1000); got != want {
		t.Errorf("DefaultEstimate(scanRequest(%s)) = %d, want %d", body, got, want)
	}
}
