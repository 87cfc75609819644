package dev.nagare.logger;

import java.nio.file.Path;
import java.util.List;
import javax.net.ssl.SSLContext;

/** The settled options of one logger (see {@link NagareLogger.Builder} for each one). */
final class Config {
  List<Endpoint> servers;
  boolean tls;
  SSLContext sslContext;
  boolean tlsVerifyHostname;
  String sharedKey;
  String username;
  String password;
  String clientHostname;
  long connectTimeoutMs;
  long writeTimeoutMs;
  long bufferLimit;
  int chunkLimit;
  long flushIntervalMs;
  Overflow overflow;
  Path spillPath;
  long spillLimit;
  long blockTimeoutMs;
  boolean ack;
  long ackTimeoutMs;
  int maxInflight;
  boolean compress;
  long retryInitialMs;
  long retryMaxMs;
  double retryMultiplier;
  double retryJitter;
  long primaryRetryMs;
  ErrorHandler errorHandler;
}
