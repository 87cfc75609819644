#!/usr/bin/env bash
# Runs a single-node Kafka broker in KRaft mode (broker and controller in one
# JVM) on loopback, for the tests (crates/nagare/tests/it/common/kafka_broker.rs)
# and the bench (benches/queues-kafka.sh):
#
#   tests/kafka/broker.sh DIR PORT CONTROLLER_PORT [PARTITIONS [SASL_PORT [SSL_PORT SSL_PEM]]]
#
# Writes DIR/server.properties, formats DIR/data with a random cluster id
# the first time (a restart on the same DIR keeps the data), then execs the
# broker in the foreground (its pid is this script's), logging to stdout.
#   KAFKA_JAVA_OPTS  JVM options (default: a small heap and a quick start)
#   PARTITIONS       partitions of a topic created on first use (default 1;
#                    0 = topics are never created on first use)
#   SASL_PORT        also a SASL_PLAINTEXT listener there, mechanisms PLAIN
#                    and SCRAM-SHA-256, one user: "nagare", password
#                    "kafka-secret" (may be "" to have none but SSL_PORT)
#   SSL_PORT         also an SSL listener there, with the key (unencrypted
#   SSL_PEM          PKCS#8) and certificate chain in the PEM file SSL_PEM
#                    (Kafka reads PEM key stores since 2.7: no keytool)
set -euo pipefail
dir=$1 port=$2 cport=$3 partitions=${4:-1} sasl_port=${5:-} ssl_port=${6:-} ssl_pem=${7:-}
libs="$("$(dirname "$0")/fetch.sh")/libs"
mkdir -p "$dir"
auto=true
[ "$partitions" = 0 ] && { auto=false; partitions=1; }
listeners=PLAINTEXT://127.0.0.1:$port
[ -n "$sasl_port" ] && listeners="$listeners,SASL_PLAINTEXT://127.0.0.1:$sasl_port"
[ -n "$ssl_port" ] && listeners="$listeners,SSL://127.0.0.1:$ssl_port"
cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=$listeners,CONTROLLER://127.0.0.1:$cport
advertised.listeners=$listeners
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL
inter.broker.listener.name=PLAINTEXT
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_nagare="kafka-secret";
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
log.dirs=$dir/data
num.partitions=$partitions
auto.create.topics.enable=$auto
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
if [ -n "$ssl_port" ]; then
  cat >> "$dir/server.properties" <<PROPS
ssl.keystore.type=PEM
ssl.keystore.location=$ssl_pem
PROPS
fi
cat > "$dir/log4j.properties" <<'LOG'
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
LOG
java_opts=${KAFKA_JAVA_OPTS:--Xms64m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1}
run() { # run CLASS ARGS...: a Kafka class with the broker's class path
  # shellcheck disable=SC2086
  java $java_opts "-Dlog4j.configuration=file:$dir/log4j.properties" -cp "$libs/*" "$@"
}
if [ ! -e "$dir/data/meta.properties" ]; then
  # A cluster id is 16 random bytes in URL-safe base64 without padding.
  id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
  # One id in 64 starts with "-", which StorageTool's argument parser takes
  # for an option ("argument --cluster-id/-t: expected one argument"): the
  # broker then never started. Any other first letter is as good.
  id=${id/#-/A}
  # The SCRAM user lives in the cluster's metadata, written at format time.
  run kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" \
    --add-scram 'SCRAM-SHA-256=[name=nagare,password=kafka-secret]' >/dev/null
fi
# shellcheck disable=SC2086
exec java $java_opts "-Dlog4j.configuration=file:$dir/log4j.properties" -cp "$libs/*" kafka.Kafka "$dir/server.properties"
