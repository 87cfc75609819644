// Scribe's interface (scribe/if/scribe.thrift of facebookarchive/scribe),
// without `extends fb303.FacebookService`: the tests call only Log, and
// fb303's IDL would be one more file. The wire format of Log is the same.

namespace py scribe

enum ResultCode
{
  OK,
  TRY_LATER
}

struct LogEntry
{
  1:  string category,
  2:  string message
}

service scribe
{
  ResultCode Log(1: list<LogEntry> messages);
}
