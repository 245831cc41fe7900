// The messages of a gateway process's control socket after its start
// (the table is in egress/gateway_process.h): each one SOCK_SEQPACKET
// record, made and read here so that both ends agree and the parsing is
// tested without a process.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "egress/counts.h"

namespace cubicle::egress {

// Whether `id` may tag connections: 1 to 64 of [A-Za-z0-9._-] (the
// daemon's request ids are a 'q' and a ULID).
bool ValidRequestId(absl::string_view id);

// "T" sandbox NUL request id: the sandbox's connections from now on belong
// to that request.
std::string TagMessage(absl::string_view sandbox, absl::string_view request_id);
// False for anything else, or a request id that is not valid.
bool ParseTagMessage(absl::string_view message, std::string* sandbox, std::string* request_id);

// "S" sequence: the counts so far, please.
std::string CountsRequest(uint64_t sequence);
bool ParseCountsRequest(absl::string_view message, uint64_t* sequence);

// "C" sequence " " counts JSON: the answer to that request; "F" counts
// JSON: the last counts, sent once the launcher has hung up.
std::string CountsReply(uint64_t sequence, const Counts& counts);
std::string FinalCounts(const Counts& counts);
// Either answer; `*sequence` is 0 for the final one. InvalidArgument for
// anything else.
absl::StatusOr<Counts> ParseCountsMessage(absl::string_view message, uint64_t* sequence, bool* final);

}  // namespace cubicle::egress
