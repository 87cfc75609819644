# A TLS server set up the way Fluentd 1.16's in_forward sets up OpenSSL
# (lib/fluent/plugin_helper/cert_option.rb, cert_option_create_context):
# SSLContext.new(:TLSv1_2), set_params({}) (which turns on VERIFY_PEER)
# and no session id context. It terminates TLS and passes the bytes both
# ways to a plain forward receiver, so a test sees what Fluentd would have
# taken. Every TLS failure is printed on stdout as "TLS-ERROR …".
#
# ruby server.rb PORT CERT KEY UPSTREAM_PORT
require 'openssl'
require 'socket'

port, cert, key, upstream = ARGV[0].to_i, ARGV[1], ARGV[2], ARGV[3].to_i
$stdout.sync = true

ctx = OpenSSL::SSL::SSLContext.new(:TLSv1_2)
ctx.set_params({})
ctx.ciphers = 'ALL:!aNULL:!eNULL:!SSLv2'
ctx.cert = OpenSSL::X509::Certificate.new(File.read(cert))
ctx.key = OpenSSL::PKey.read(File.read(key))

# As Fluentd (plugin_helper/server.rb, TLSServer): an SSLSocket on each
# accepted socket, not OpenSSL::SSL::SSLServer, which would set a session
# id context of its own.
tcp = TCPServer.new('127.0.0.1', port)
puts "listening #{port}"

def pipe(from, to)
  loop { to.write(from.readpartial(65_536)) }
rescue EOFError, IOError, Errno::ECONNRESET, Errno::EPIPE
  nil
rescue OpenSSL::SSL::SSLError => e
  puts "TLS-ERROR read: #{e.message}"
end

loop do
  sock = tcp.accept
  begin
    ssl = OpenSSL::SSL::SSLSocket.new(sock, ctx)
    ssl.sync_close = true
    ssl.accept
  rescue OpenSSL::SSL::SSLError => e
    sock.close rescue nil
    puts "TLS-ERROR accept: #{e.message}"
    next
  rescue StandardError => e
    puts "ERROR accept: #{e.class}: #{e.message}"
    next
  end
  puts 'accepted'
  Thread.new(ssl) do |s|
    up = TCPSocket.new('127.0.0.1', upstream)
    back = Thread.new { pipe(up, s) }
    pipe(s, up)
    up.close_write rescue nil
    back.join
    s.close rescue nil
    up.close rescue nil
  end
end
