package vendorsim

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResponsesKeepsWhatEachKeyMade: an ID one key made serves that key's
// next turn and is refused to another's, named as previous_response_id or
// as a conversation; a stream's first event carries the ID.
func TestResponsesKeepsWhatEachKeyMade(t *testing.T) {
	v := &Responses{}
	srv := httptest.NewServer(v)
	t.Cleanup(srv.Close)
	post := func(key, path, body string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	idOf := regexp.MustCompile(`"id":"((?:resp|conv)_[0-9a-f]+)"`)
	_, answer := post("a", "/v1/responses", `{"input":"hi"}`)
	resp := idOf.FindStringSubmatch(answer)[1]
	_, answer = post("a", "/v1/conversations", `{}`)
	conv := idOf.FindStringSubmatch(answer)[1]
	require.True(t, strings.HasPrefix(conv, "conv_"))

	status, _ := post("a", "/v1/responses", `{"previous_response_id":"`+resp+`"}`)
	assert.Equal(t, http.StatusOK, status)
	status, answer = post("b", "/v1/responses", `{"previous_response_id":"`+resp+`"}`)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, answer, `"code":"previous_response_not_found"`)
	status, _ = post("b", "/v1/responses", `{"conversation":{"id":"`+conv+`"}}`)
	assert.Equal(t, http.StatusBadRequest, status)
	status, _ = post("a", "/v1/responses", `{"conversation":"`+conv+`"}`)
	assert.Equal(t, http.StatusOK, status)

	status, answer = post("a", "/v1/responses", `{"stream":true}`)
	assert.Equal(t, http.StatusOK, status)
	assert.Regexp(t, `^event: response.created\ndata: \{"type":"response.created","response":\{"id":"resp_`, answer)
	assert.Contains(t, answer, `"usage":{"input_tokens":10`)
	assert.Equal(t, []string{"a", "a", "a", "b", "b", "a", "a"}, v.Served(0))
}
