package keypool

// The vendor catalogue: what vendors say, and where each was seen. The
// header families a vendor sends and the codes and phrases of its bodies
// are data here, each entry with its vendor and source; the reading that
// matches them is in reset_headers.go, reset_body.go and reset_prose.go.
// Phrases are matched against the lower-cased text of an error body.

// Canonical names of the headers read one by one.
const (
	headerRetryAfter     = "Retry-After"         // RFC 9110: seconds or an HTTP-date
	headerRetryAfterMs   = "Retry-After-Ms"      // OpenAI and Azure OpenAI: milliseconds
	headerMsRetryAfterMs = "X-Ms-Retry-After-Ms" // Azure: milliseconds
	// headerGroqRegion names the Groq region that served an answer ("dls",
	// "fra", "bom"). Only Groq sends it, and it is how Groq's per-day
	// x-ratelimit-*-requests are told from OpenAI's per-minute ones.
	headerGroqRegion = "X-Groq-Region"

	// draft-ietf-httpapi-ratelimit-headers-08 and later.
	headerRateLimit       = "Ratelimit"
	headerRateLimitPolicy = "Ratelimit-Policy"

	// Anthropic's subscription (Claude Pro/Max through OAuth) headers; the
	// windows themselves are in unifiedWindows.
	headerUnifiedStatus = "Anthropic-Ratelimit-Unified-Status"
	headerUnifiedReset  = "Anthropic-Ratelimit-Unified-Reset"
	headerUnifiedClaim  = "Anthropic-Ratelimit-Unified-Representative-Claim"
	// headerUnifiedOverageReason says why extra usage (overage) is closed:
	// out_of_credits when its credits are spent
	// (github.com/tombii/better-ccflare/issues/261).
	headerUnifiedOverageReason = "Anthropic-Ratelimit-Unified-Overage-Disabled-Reason"
)

// counters are the limit/remaining/reset triples vendors send. The same name
// does not mean the same window at every vendor: atGroq says where Groq
// differs.
var counters = [...]counter{
	// OpenAI: per-minute requests and tokens, resets as Go durations ("6ms",
	// "6m0s"); https://platform.openai.com/docs/guides/rate-limits. Azure
	// OpenAI sends the same names, sometimes only the remaining counts
	// (github.com/EvolvingPrograms/oaib/issues/11), or -1 and 0 as
	// placeholders for unknown (github.com/openai/openai-dotnet/issues/838).
	// Groq: -requests counts requests per DAY, -tokens tokens per minute;
	// https://console.groq.com/docs/rate-limits.
	{limit: "X-Ratelimit-Limit-Requests", remaining: "X-Ratelimit-Remaining-Requests", reset: "X-Ratelimit-Reset-Requests",
		atGroq: WindowDaily, axis: axisRPM, axisAtGroq: axisRPD, resetAlone: true},
	{limit: "X-Ratelimit-Limit-Tokens", remaining: "X-Ratelimit-Remaining-Tokens", reset: "X-Ratelimit-Reset-Tokens",
		axis: axisTPM, resetAlone: true},
	// Cerebras names the window in the header; resets are countdowns in float
	// seconds; https://inference-docs.cerebras.ai/support/rate-limits.
	// Mistral sends -tokens-minute too, without a reset
	// (github.com/mistralai/client-ts/issues/169).
	{limit: "X-Ratelimit-Limit-Requests-Day", remaining: "X-Ratelimit-Remaining-Requests-Day", reset: "X-Ratelimit-Reset-Requests-Day",
		window: WindowDaily, axis: axisRPD},
	{limit: "X-Ratelimit-Limit-Tokens-Minute", remaining: "X-Ratelimit-Remaining-Tokens-Minute", reset: "X-Ratelimit-Reset-Tokens-Minute",
		axis: axisTPM},
	// Mistral: requests per minute, no reset (same source).
	{limit: "X-Ratelimit-Limit-Req-Minute", remaining: "X-Ratelimit-Remaining-Req-Minute",
		axis: axisRPM},
	// One unnamed window: GitHub (hourly, reset in epoch seconds;
	// docs.github.com rate-limits-for-the-rest-api), OpenRouter (reset in
	// epoch milliseconds, also inside its 429 bodies), Together (a countdown
	// in seconds, on 429s; togethercomputer/skills#61).
	{limit: "X-Ratelimit-Limit", remaining: "X-Ratelimit-Remaining", reset: "X-Ratelimit-Reset",
		resetAlone: true},
	// The IETF three-field form, draft-ietf-httpapi-ratelimit-headers-00 to
	// -06: countdown seconds (gitlab.com sends epoch seconds instead).
	{limit: "Ratelimit-Limit", remaining: "Ratelimit-Remaining", reset: "Ratelimit-Reset",
		policies: true},
	// Anthropic API keys: per-minute buckets, resets in RFC 3339;
	// https://docs.anthropic.com/en/api/rate-limits#response-headers. The
	// tokens bucket is the tightest of the input and output ones, which
	// the pool's windows (one token count) do not keep apart.
	{limit: "Anthropic-Ratelimit-Requests-Limit", remaining: "Anthropic-Ratelimit-Requests-Remaining", reset: "Anthropic-Ratelimit-Requests-Reset",
		axis: axisRPM, resetAlone: true},
	{limit: "Anthropic-Ratelimit-Tokens-Limit", remaining: "Anthropic-Ratelimit-Tokens-Remaining", reset: "Anthropic-Ratelimit-Tokens-Reset",
		axis: axisTPM, resetAlone: true},
	{limit: "Anthropic-Ratelimit-Input-Tokens-Limit", remaining: "Anthropic-Ratelimit-Input-Tokens-Remaining", reset: "Anthropic-Ratelimit-Input-Tokens-Reset"},
	{limit: "Anthropic-Ratelimit-Output-Tokens-Limit", remaining: "Anthropic-Ratelimit-Output-Tokens-Remaining", reset: "Anthropic-Ratelimit-Output-Tokens-Reset"},
}

// unifiedWindows are the windows of a Claude subscription: utilization as a
// fraction (above 1 is real), reset in epoch seconds, status allowed,
// allowed_warning or rejected; claim is the representative-claim value that
// names the window. 7d_oi is the weekly window of models served only from
// extra usage ("overage included"), which Anthropic scopes to those models.
// Sources: live answers recorded in
// PabloLION/agent-console-dashboard:docs/agents/hook-research/oauth-403-research.md
// and github.com/router-for-me/CLIProxyAPI/issues/5915.
var unifiedWindows = [...]struct {
	utilization, reset, status string
	window                     Window
	claim                      string
	plan                       bool // the plan's window, over every model (7d_oi counts only its models)
}{
	{"Anthropic-Ratelimit-Unified-5h-Utilization", "Anthropic-Ratelimit-Unified-5h-Reset", "Anthropic-Ratelimit-Unified-5h-Status",
		Window5h, "five_hour", true},
	{"Anthropic-Ratelimit-Unified-7d-Utilization", "Anthropic-Ratelimit-Unified-7d-Reset", "Anthropic-Ratelimit-Unified-7d-Status",
		WindowWeekly, "seven_day", true},
	{"Anthropic-Ratelimit-Unified-7d_oi-Utilization", "Anthropic-Ratelimit-Unified-7d_oi-Reset", "Anthropic-Ratelimit-Unified-7d_oi-Status",
		WindowWeekly, "seven_day_overage_included", false},
}

// codexWindows are the two window slots of the ChatGPT backend (Codex): used
// percent 0–100, window length in minutes, reset as epoch seconds or a
// countdown. A slot is not a window — a free plan's primary slot is the
// weekly window — so the window comes from the length. Sources:
// openai/codex codex-rs rate-limit parsing; answers recorded in
// github.com/earendil-works/pi/issues/4172 and
// github.com/icebear0828/codex-proxy/issues/65.
var codexWindows = [...]struct{ usedPercent, minutes, resetAt, resetAfter string }{
	{"X-Codex-Primary-Used-Percent", "X-Codex-Primary-Window-Minutes", "X-Codex-Primary-Reset-At", "X-Codex-Primary-Reset-After-Seconds"},
	{"X-Codex-Secondary-Used-Percent", "X-Codex-Secondary-Window-Minutes", "X-Codex-Secondary-Reset-At", "X-Codex-Secondary-Reset-After-Seconds"},
}

// billingPhrases name a spent balance, credit or spend limit.
var billingPhrases = [...]string{
	"insufficient_quota",           // OpenAI 429 type and code
	"billing_hard_limit",           // OpenAI, the organization's hard spend cap
	"credit balance is too low",    // Anthropic 400 (anthropics/claude-code#4684)
	"api usage limits",             // Anthropic 400, the organization's spend limit (anthropics/claude-code#38035)
	"insufficient balance",         // DeepSeek 402
	"insufficient credits",         // OpenRouter 402
	"more credits are required",    // OpenRouter 402, a key's credit limit
	"requires more credits",        // OpenRouter 402
	"out of credits",               // xAI 403
	"used all available credits",   // xAI 429
	"reached its monthly spending", // xAI 429
	"out of extra usage",           // Anthropic subscription 400 (router-for-me/CLIProxyAPI#2599)
	"draw from your extra usage",   // Anthropic subscription 400 (NousResearch/hermes-agent#31668)
	"out_of_credits",               // Anthropic overage-disabled-reason (tombii/better-ccflare#261)
	"quota is not enough",          // one-api 403 insufficient_user_quota (songquanpeng/one-api#1270)
	"budget has been exceeded",     // LiteLLM proxy 400 (BerriAI/litellm#14144)
	"spend limit",                  // Anthropic 429 "would exceed your account's monthly spend limit" (can1357/oh-my-pi#5418)
	"exceeded_current_quota",       // Moonshot error.type exceeded_current_quota_error, on a 403 or 429
	"balance is insufficient",      // SiliconFlow 403 30011 "Your paid balance is insufficient"
	"payment is past due",          // Ollama Cloud 403 "your subscription payment is past due"
	"overdue",                      // Volcengine 403 code AccountOverdueError
	"arrearage",                    // DashScope 400 code Arrearage
	"credits remaining",            // ElevenLabs 401 quota_exceeded "You have 0 credits remaining"
	"余额不足",                         // "insufficient balance": Zhipu 1113 "余额不足或无可用资源包,请充值", and kin
	"请充值",                          // "please top up"
}

// quotaPhrases name a spent allowance, or one the plan does not include,
// whether or not they name its window: no short wait brings it back.
var quotaPhrases = [...]string{
	"usage_limit_reached",       // ChatGPT backend 429
	"usage_not_included",        // ChatGPT backend: the plan does not include the usage
	"not included in your plan", // ChatGPT backend 403 (RayBytes/ChatMock#54)
	"extra usage",               // Anthropic subscription: "Extra usage is required for long context requests."
	"are cooling down",          // a router's own cooldown: "All credentials for model X are cooling down" (CLIProxyAPI)
	"free-usage-exhausted",      // Grok CLI 429 (Vanszs/VansRouter#56)
	"allocated quota exceeded",  // Qwen 429 "Free allocated quota exceeded."
}

// authPhrases name a refused key where the status does not (Gemini and xAI
// answer a bad key with 400).
var authPhrases = [...]string{
	"api key not valid", // Gemini 400
	"api_key_invalid",   // Gemini 400 ErrorInfo reason
	"incorrect api key", // xAI 400, OpenAI 401
	"invalid_api_key",   // OpenAI 401 code
	"invalid api key",
	"consumer_suspended", // Gemini 403 ErrorInfo reason: the key's consumer is suspended
}

// throttlePhrases name a rate limit, which turns a 403 from a permission
// failure into a throttle (GitHub: "API rate limit exceeded", "You have
// exceeded a secondary rate limit").
var throttlePhrases = [...]string{"rate limit", "rate_limit", "too many requests", abuseLimitPhrase}

// GitHub's secondary rate limit, which its x-ratelimit-reset dates although
// the primary window has room; "abuse detection" is its older name
// (inaka/erlang-github#27).
const (
	secondaryLimitPhrase = "secondary rate limit"
	abuseLimitPhrase     = "abuse detection mechanism"
)

// oversizedPhrases name a request that exceeds a per-minute limit on its
// own, which no wait cures (OpenAI 429 and Groq 413 "Request too large for
// model …").
var oversizedPhrases = [...]string{"request too large"}

// overloadPhrases name the vendor's overload, which some vendors answer
// with a 429: no other key on the same engine fares better.
var overloadPhrases = [...]string{
	"overload",         // Moonshot 429 "engine is currently overloaded"; Novita 429 "server overload"
	"traffic too high", // "model traffic too high"
	"traffic is too high",
	"at capacity", // Nous 429 "temporarily at capacity upstream. This is not your API key's rate limit"
	"访问量过大",       // Zhipu 429 1305 "该模型当前访问量过大" (the model's traffic is too high)
}

// sizedPhrases say a request is too large for what the key has left: a
// smaller one would be served, so the key is not out.
var sizedPhrases = [...]string{
	"fewer max_tokens",             // OpenRouter 402 "requires more credits, or fewer max_tokens"
	"can only afford",              // OpenRouter 402 "but can only afford 3234"
	"prompt tokens limit exceeded", // OpenRouter 402 "Prompt tokens limit exceeded: 23229 > 14796"
	"token capacity required",      // OpenRouter 402 "128000 token capacity required, 19484 available"
}

// minutePhrases name a per-minute limit. A body that names one beside a
// per-day limit in prose, and asks for a short wait, is about the minute.
var minutePhrases = [...]string{"per minute", "per min", "per-minute", "(rpm)", "(tpm)"}

// windowPhrases name a window; when several match, the longest is named.
var windowPhrases = [...]struct {
	phrase string
	window Window
}{
	{"per day", WindowDaily},   // OpenAI and Groq "requests per day (RPD)", "tokens per day (TPD)"; Cerebras "Requests per day limit exceeded"
	{"per-day", WindowDaily},   // OpenRouter "free-models-per-day"
	{"perday", WindowDaily},    // Gemini quota ids "GenerateRequestsPerDayPerProjectPerModel-FreeTier"
	{"daily", WindowDaily},     // OpenRouter limit_source "openrouter_free_tier_daily"
	{"weekly", WindowWeekly},   // plain wording
	{"monthly", WindowMonthly}, // xAI "reached its monthly spending limit"
	// Anthropic's spend limits are monthly: access is regained on the 1st
	// (anthropics/claude-code#38035).
	{"api usage limits", WindowMonthly},
	// A window named by its period: "limited to 1000 API calls / month".
	{"per week", WindowWeekly}, {"/ week", WindowWeekly}, {"/week", WindowWeekly},
	{"per month", WindowMonthly}, {"/ month", WindowMonthly}, {"/month", WindowMonthly},
	{"/ day", WindowDaily}, {"/day", WindowDaily},
	// Ollama Cloud's session limit is its 5-hour window (fgrehm/pi-ollama-cloud#42).
	{"session usage limit", Window5h},
}

// delayMarkers introduce a delay stated in prose — Django REST framework's
// "Expected available in 7 seconds" too — OpenAI and Groq "Please try
// again in 26.604s" and "644ms", Azure "Try again in 50 seconds" and "Please
// retry after 86400 seconds", Gemini "Please retry in 10.689924287s", GitHub
// Models "Please wait 60 seconds before retrying".
var delayMarkers = [...]string{"try again in ", "retry after ", "retry in ", "please wait ", "available in "}

// resetMarkers introduce when a limit lifts, stated in prose: a horizon, not
// a wait asked for (Gemini Code Assist "Your quota will reset after 54s";
// "resets in ~30s"; "reset in 3 hours 49 minutes").
var resetMarkers = [...]string{"reset after ", "resets in ", "reset in "}

// resetAtMarkers introduce the moment a limit lifts, stated in prose.
var resetAtMarkers = [...]string{
	"regain access on ", // Anthropic 400: "You will regain access on 2026-04-01 at 00:00 UTC."
	"resets at ",        // "Throttle resets at 2024-10-18 14:55:00 +0000"; "Resets at 10:00 UTC"
	"reset at ",
	"resets on ",
	"reset on ", // Copilot 429 "wait for your limit to reset on April 20, 2026 at 2:00 AM"
	"将在 ",       // Zhipu 429 1308 "您的限额将在 2026-08-25 07:41:44 重置" (your limit will reset at …)
	"available at ",
}

// proseTimeLayouts are the absolute times prose states beyond what a
// vendor's time fields hold (RFC 3339, HTTP-dates, epochs, which
// timeValue reads); a layout without a zone is in the zone of the text
// (zoneOfText).
var proseTimeLayouts = [...]string{
	"2006-01-02 at 15:04 MST",   // Anthropic's "2026-04-01 at 00:00 UTC"
	"2006-01-02 15:04:05 -0700", // a Rails throttle's "2024-10-18 14:55:00 +0000"
	"2006-01-02 15:04:05 MST",
	"2006-01-02 15:04 MST",
	"2006-01-02 15:04:05",        // Zhipu 429 1308 "Your limit will reset at 2026-09-09 05:38:28"
	"January 2, 2006 at 3:04 PM", // Copilot 429 "reset on April 20, 2026 at 2:00 AM"
	"January 2, 2006 at 15:04",
}

// chinaTimePhrases name answers whose times without a zone are China's
// though their text is English: Zhipu's coding plan ("the dated reset is
// Beijing time", hugalafutro/model-hotel#955; its retry-after-ms agrees,
// Yeachan-Heo/gajae-code#1821).
var chinaTimePhrases = [...]string{"usage limit reached for 5 hour", "weekly/monthly limit exhausted"}
