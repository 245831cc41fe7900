#include "egress/http.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"

namespace cubicle::egress {
namespace {

absl::Status Malformed(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("malformed request: ", why));
}

bool IsTokenChar(char c) {
  static constexpr absl::string_view kExtra = "!#$%&'*+-.^_`|~";
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || kExtra.find(c) != absl::string_view::npos;
}

bool IsToken(absl::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), IsTokenChar); }

bool IsVisible(absl::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// host[:port] with an IPv6 literal in brackets. `default_port` 0: required.
absl::Status ParseAuthority(absl::string_view authority, uint16_t default_port, RequestHead* head) {
  if (authority.find('@') != absl::string_view::npos) return Malformed("userinfo in the authority");
  absl::string_view host, port;
  if (!authority.empty() && authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == absl::string_view::npos) return Malformed("unclosed '[' in the authority");
    host = authority.substr(1, close - 1);
    absl::string_view rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return Malformed("junk after ']' in the authority");
      port = rest.substr(1);
      if (port.empty()) return Malformed("empty port");
    }
    if (host.find_first_not_of("0123456789abcdefABCDEF:.") != absl::string_view::npos) {
      return Malformed("bad IPv6 literal");
    }
  } else {
    size_t colon = authority.rfind(':');
    host = authority.substr(0, colon);
    if (colon != absl::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) return Malformed("empty port");
    }
    if (host.find(':') != absl::string_view::npos) return Malformed("an IPv6 literal needs brackets");
  }
  if (host.empty()) return Malformed("empty host");
  if (port.empty()) {
    if (default_port == 0) return Malformed("CONNECT needs host:port");
    head->port = default_port;
  } else {
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535 ||
        port.size() > 5) {
      return Malformed(absl::StrCat("port '", port, "'"));
    }
    head->port = static_cast<uint16_t>(value);
  }
  head->host = std::string(host);
  return absl::OkStatus();
}

// A forward proxy's target: "http://authority[/path][?query]", with the
// authority dropped from what goes upstream.
absl::Status ParseAbsoluteTarget(absl::string_view target, RequestHead* head) {
  if ((!target.empty() && target.front() == '/') || target == "*") {
    return absl::UnimplementedError("origin-form request: this is a forward proxy, send an absolute URI");
  }
  constexpr absl::string_view kHttp = "http://";
  if (target.size() < kHttp.size() || !absl::EqualsIgnoreCase(target.substr(0, kHttp.size()), kHttp)) {
    if (absl::StartsWithIgnoreCase(target, "https://")) {
      return absl::UnimplementedError("https:// absolute URI: use CONNECT for TLS");
    }
    return absl::UnimplementedError("only http:// absolute URIs and CONNECT are served");
  }
  absl::string_view rest = target.substr(kHttp.size());
  if (rest.find('#') != absl::string_view::npos) return Malformed("fragment in the target");
  size_t path = rest.find_first_of("/?");
  if (absl::Status st = ParseAuthority(rest.substr(0, path), 80, head); !st.ok()) return st;
  absl::string_view origin = path == absl::string_view::npos ? "" : rest.substr(path);
  head->target = origin.empty() ? "/" : origin.front() == '?' ? absl::StrCat("/", origin) : std::string(origin);
  return absl::OkStatus();
}

// "METHOD TARGET VERSION": CONNECT host:port, or an absolute http:// URI.
absl::Status ParseRequestLine(absl::string_view line, RequestHead* head) {
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3) return Malformed("request line is not 'METHOD TARGET VERSION'");
  if (!IsToken(parts[0])) return Malformed("bad method");
  if (!IsVisible(parts[1])) return Malformed("bad characters in the target");
  if (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0") return Malformed("version is not HTTP/1.0 or HTTP/1.1");
  head->method = std::string(parts[0]);
  head->version = std::string(parts[2]);
  if (head->method != "CONNECT") return ParseAbsoluteTarget(parts[1], head);
  head->connect = true;
  return ParseAuthority(parts[1], 0, head);
}

// The header lines after the request line, kept in order.
absl::Status ParseHeaderLines(absl::Span<const absl::string_view> lines, RequestHead* head) {
  std::optional<absl::string_view> content_length;
  bool chunked = false;
  for (absl::string_view line : lines) {
    if ((!line.empty() && line.front() == ' ') || (!line.empty() && line.front() == '\t')) return Malformed("obsolete header line folding");
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos) return Malformed("header line without ':'");
    absl::string_view name = line.substr(0, colon);
    if (!IsToken(name)) return Malformed(absl::StrCat("bad header name '", name, "'"));
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    for (char c : value) {
      auto u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\t') || u == 0x7f) return Malformed("control character in a header value");
    }
    if (absl::EqualsIgnoreCase(name, "content-length")) {
      // Two different lengths are a request-smuggling attempt.
      if (content_length.has_value() && *content_length != value) return Malformed("conflicting Content-Length");
      if (value.empty() || value.find_first_not_of("0123456789") != absl::string_view::npos) {
        return Malformed("bad Content-Length");
      }
      content_length = value;
    }
    if (absl::EqualsIgnoreCase(name, "transfer-encoding")) chunked = true;
    head->headers.emplace_back(std::string(name), std::string(value));
  }
  if (chunked && content_length.has_value()) return Malformed("both Transfer-Encoding and Content-Length");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<RequestHead>> ParseRequestHead(absl::string_view buffered) {
  // Refuse what is ambiguous as soon as it is seen, not when the head ends:
  // a head that never ends would otherwise wait for the idle timeout.
  const size_t scan = std::min(buffered.size(), kMaxRequestHead);
  for (size_t i = 0; i < scan; ++i) {
    const char c = buffered[i];
    if (c == '\0') return Malformed("NUL byte in the head");
    if (c == '\n' && (i == 0 || buffered[i - 1] != '\r')) return Malformed("bare LF");
    if (c == '\r' && i + 1 < scan && buffered[i + 1] != '\n') return Malformed("bare CR");
  }
  const size_t end = buffered.substr(0, scan).find("\r\n\r\n");
  if (end == absl::string_view::npos) {
    if (buffered.size() >= kMaxRequestHead) {
      return absl::ResourceExhaustedError(absl::StrCat("request head larger than ", kMaxRequestHead, " bytes"));
    }
    return std::nullopt;
  }
  RequestHead head;
  head.head_bytes = end + 4;
  std::vector<absl::string_view> lines = absl::StrSplit(buffered.substr(0, end), "\r\n");
  if (lines.size() - 1 > kMaxHeaderCount) {
    return absl::ResourceExhaustedError(absl::StrCat("more than ", kMaxHeaderCount, " header lines"));
  }
  if (absl::Status st = ParseRequestLine(lines[0], &head); !st.ok()) return st;
  if (absl::Status st = ParseHeaderLines(absl::MakeConstSpan(lines).subspan(1), &head); !st.ok()) return st;
  return head;
}

std::string UpstreamHead(const RequestHead& head) {
  // Hop-by-hop headers, and whatever Connection names, stop here.
  std::vector<std::string> dropped = {"connection", "keep-alive", "proxy-connection", "proxy-authorization",
                                      "proxy-authenticate", "te", "trailer", "upgrade", "host"};
  for (const auto& [name, value] : head.headers) {
    if (!absl::EqualsIgnoreCase(name, "connection")) continue;
    for (absl::string_view token : absl::StrSplit(value, ',')) {
      dropped.push_back(absl::AsciiStrToLower(absl::StripAsciiWhitespace(token)));
    }
  }
  const bool v6 = head.host.find(':') != std::string::npos;
  std::string out = absl::StrCat(head.method, " ", head.target, " ", head.version, "\r\nHost: ", v6 ? "[" : "",
                                 head.host, v6 ? "]" : "", head.port == 80 ? "" : absl::StrCat(":", head.port),
                                 "\r\n");
  for (const auto& [name, value] : head.headers) {
    if (std::find(dropped.begin(), dropped.end(), absl::AsciiStrToLower(name)) != dropped.end()) continue;
    absl::StrAppend(&out, name, ": ", value, "\r\n");
  }
  absl::StrAppend(&out, "Connection: close\r\n\r\n");
  return out;
}

}  // namespace cubicle::egress
