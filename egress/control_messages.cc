#include "egress/control_messages.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cubicle::egress {

bool ValidRequestId(absl::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

std::string TagMessage(absl::string_view sandbox, absl::string_view request_id) {
  std::string out = absl::StrCat("T", sandbox);
  out.push_back('\0');
  absl::StrAppend(&out, request_id);
  return out;
}

bool ParseTagMessage(absl::string_view message, std::string* sandbox, std::string* request_id) {
  if (message.empty() || message[0] != 'T') return false;
  message.remove_prefix(1);
  const size_t nul = message.find('\0');
  if (nul == absl::string_view::npos || nul == 0) return false;
  const absl::string_view id = message.substr(nul + 1);
  if (!ValidRequestId(id)) return false;
  *sandbox = std::string(message.substr(0, nul));
  *request_id = std::string(id);
  return true;
}

std::string CountsRequest(uint64_t sequence) { return absl::StrCat("S", sequence); }

bool ParseCountsRequest(absl::string_view message, uint64_t* sequence) {
  if (message.empty() || message[0] != 'S') return false;
  return absl::SimpleAtoi(message.substr(1), sequence) && *sequence > 0;
}

std::string CountsReply(uint64_t sequence, const Counts& counts) {
  return absl::StrCat("C", sequence, " ", CountsToJson(counts));
}

std::string FinalCounts(const Counts& counts) { return absl::StrCat("F", CountsToJson(counts)); }

absl::StatusOr<Counts> ParseCountsMessage(absl::string_view message, uint64_t* sequence, bool* final) {
  if (!message.empty() && message[0] == 'F') {
    *sequence = 0;
    *final = true;
    return CountsFromJson(message.substr(1));
  }
  if (message.empty() || message[0] != 'C') return absl::InvalidArgumentError("egress counts: not a counts message");
  message.remove_prefix(1);
  const size_t space = message.find(' ');
  if (space == absl::string_view::npos || !absl::SimpleAtoi(message.substr(0, space), sequence) || *sequence == 0) {
    return absl::InvalidArgumentError("egress counts: no sequence number");
  }
  *final = false;
  return CountsFromJson(message.substr(space + 1));
}

}  // namespace cubicle::egress
