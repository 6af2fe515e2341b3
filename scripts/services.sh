#!/usr/bin/env bash
# Starts and stops the real services the tests use, as plain processes on
# 127.0.0.1: an Apache Kafka 4.x or 3.9 broker (KRaft, jars from Maven
# Central; TESTENV_KAFKA below),
# Google's Bigtable emulator and Apicurio Registry (from Maven Central too),
# whose Confluent-compatible API the schema-registry value formats read.
#
#   scripts/services.sh start [--no-registry]   # prints the environment to export
#   scripts/services.sh stop
#   scripts/services.sh env     # the environment of the running services
#   scripts/services.sh kafka-kill | kafka-start   # crash and restart the broker
#   scripts/services.sh kafka2-start | kafka2-kill | kafka2-stop | elect-preferred
#                                   # a second broker, and leader changes
#   scripts/services.sh kube-start | kube-stop   # a Kubernetes API server and etcd
#
# State lives in $TESTENV_SERVICES_DIR (default .services/ in the repo); the
# Kafka jars, the registry and its Java serializers are cached in
# ~/.cache/cellttl so later starts take seconds; so are kube-apiserver and
# kubectl, whose first build takes minutes.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${TESTENV_SERVICES_DIR:-$repo/.services}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/cellttl
# TESTENV_KAFKA picks the broker: 4 (Kafka 4.4.0, the default) or 3 (3.9.1,
# the last with ZooKeeper, here in KRaft mode too). Their jars come from
# Maven Central (scripts/kafka4/pom.xml, scripts/kafka/pom.xml); they log
# through log4j 2 and reload4j.
case ${TESTENV_KAFKA:-4} in
4)
	kafka_version=4.4.0
	kafka_pom=$repo/scripts/kafka4
	kafka_log="-Dlog4j2.configurationFile=$repo/scripts/kafka4/log4j2.properties"
	kafka_tools=org.apache.kafka.tools
	;;
3)
	kafka_version=3.9.1
	kafka_pom=$repo/scripts/kafka
	kafka_log="-Dlog4j.configuration=file:$repo/scripts/kafka/log4j.properties"
	kafka_tools=kafka.admin
	;;
*)
	echo "services: TESTENV_KAFKA=${TESTENV_KAFKA}: want 4 or 3" >&2
	exit 2
	;;
esac
kafka_lib=$cache/kafka-$kafka_version/lib
# Apicurio Registry 3.x needs Java 21 or newer; 2.6 runs on Java 17 (see
# pick_registry). Its Java serializers (scripts/registry/pom.xml) are the
# independent producers of the value-format tests.
registry_new=3.3.3
registry_old=2.6.13.Final
serdes_lib=$cache/apicurio-serdes-2.6.13.Final/lib

# The test user of the SASL listener; a throwaway credential on loopback.
sasl_user=cellttl
sasl_password=cellttl-test-secret

# The Kubernetes API server of the deploy tests (kube-start): kube-apiserver
# and etcd, no controllers, no kubelet. It validates, defaults, admits and
# stores what kubectl applies, as a cluster's API server does. The
# binaries are built from k8s.io/kubernetes (scripts/kubernetes/go.mod pins
# the version) and cached by version and go.sum; etcd is Debian's.
kube_mod=$repo/scripts/kubernetes
kube_version=$(sed -n 's#^require k8s.io/kubernetes v##p' "$kube_mod/go.mod")
kube_home=$cache/kubernetes-$kube_version-$(cat "$kube_mod/go.mod" "$kube_mod/go.sum" | sha256sum | cut -c1-12)
kube_dir=$dir/kube
# The CRDs of the other projects' kinds that deploy/k8s uses, or that the
# GitOps recipes apply it with, each from its project's own module zip:
# module@version, then the files in it.
kube_crds=(
	"github.com/prometheus-operator/prometheus-operator@v0.85.0 example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"
	"github.com/kedacore/keda/v2@v2.21.0 config/crd/bases/keda.sh_scaledobjects.yaml config/crd/bases/keda.sh_triggerauthentications.yaml"
	"github.com/fluxcd/kustomize-controller@v1.9.6 config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml"
	"github.com/fluxcd/source-controller@v1.9.6 config/crd/bases/source.toolkit.fluxcd.io_gitrepositories.yaml"
	"github.com/argoproj/argo-cd/v3@v3.5.7 manifests/crds/application-crd.yaml"
)

log() { echo "services: $*" >&2; }

# kjava runs a class from the Kafka jars with the project's log settings.
kjava() {
	java "$kafka_log" -cp "$kafka_lib/*" "$@"
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

wait_tcp() { # host port seconds
	local deadline=$((SECONDS + $3))
	until (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; do
		[ $SECONDS -lt $deadline ] || return 1
		sleep 0.2
	done
}

fetch_kafka() {
	if ls "$kafka_lib"/kafka-tools-$kafka_version.jar >/dev/null 2>&1; then
		return
	fi
	log "fetching Kafka $kafka_version jars from Maven Central into $kafka_lib"
	mkdir -p "$kafka_lib"
	(cd "$kafka_pom" && mvn -q -B dependency:copy-dependencies -DoutputDirectory="$kafka_lib") >&2
}

# java_major prints the major version of a java binary (17, 21, 25...).
java_major() {
	"$1" -version 2>&1 | sed -n '1s/.*version "\([0-9]*\).*/\1/p'
}

# newest_jdk prints the JAVA_HOME of the newest JDK of at least the given
# major version under /usr/lib/jvm, or nothing.
newest_jdk() { # min-major
	local best="" bestv=0 d v
	for d in /usr/lib/jvm/*/; do
		d=${d%/}
		[ -x "$d/bin/java" ] && [ ! -L "$d" ] || continue
		v=$(java_major "$d/bin/java")
		if [ -n "$v" ] && [ "$v" -ge "$1" ] && [ "$v" -gt "$bestv" ]; then
			best=$d
			bestv=$v
		fi
	done
	echo "$best"
}

# pick_registry sets registry_java and registry_version: Apicurio 3.x on a
# JDK >= 21 when one is installed (or JAVA_HOME is one), else 2.6 on the
# java on PATH (Java 17).
pick_registry() {
	local home=""
	if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ] && [ "$(java_major "$JAVA_HOME/bin/java")" -ge 21 ]; then
		home=$JAVA_HOME
	else
		home=$(newest_jdk 21)
	fi
	if [ -n "$home" ]; then
		registry_java=$home/bin/java
		registry_version=$registry_new
	else
		registry_java=java
		registry_version=$registry_old
	fi
	registry_home=$cache/apicurio-registry-$registry_version
}

# fetch_registry unpacks Apicurio Registry's ready-to-run bundle (the app's
# tar.gz of classifier "all") from Maven Central into the cache, once.
fetch_registry() {
	if [ -f "$registry_home/quarkus-run.jar" ]; then
		return
	fi
	log "fetching Apicurio Registry $registry_version from Maven Central into $registry_home"
	local tmp
	mkdir -p "$cache" # a fresh machine has no cache yet
	tmp=$(mktemp -d "$cache/registry-fetch.XXXXXX")
	(cd "$repo/scripts/registry" && mvn -q -B dependency:copy \
		-Dartifact="io.apicurio:apicurio-registry-app:$registry_version:tar.gz:all" -DoutputDirectory="$tmp") >&2
	mkdir -p "$tmp/unpacked"
	tar -xzf "$tmp"/apicurio-registry-app-*.tar.gz -C "$tmp/unpacked"
	rm -rf "$registry_home"
	mv "$tmp/unpacked" "$registry_home"
	rm -rf "$tmp"
}

# fetch_serdes copies Apicurio's Java serializers and their dependencies
# (scripts/registry/pom.xml) into the cache, once.
fetch_serdes() {
	if ls "$serdes_lib"/apicurio-registry-serdes-avro-serde-*.jar >/dev/null 2>&1; then
		return
	fi
	log "fetching Apicurio's Java serializers from Maven Central into $serdes_lib"
	mkdir -p "$serdes_lib"
	(cd "$repo/scripts/registry" && mvn -q -B dependency:copy-dependencies -DoutputDirectory="$serdes_lib") >&2
}

# fetch_python installs Confluent's Python client and serializers
# (scripts/registry/requirements.txt, pinned) into a virtualenv in the
# cache, once per version of that file.
fetch_python() {
	local sum
	sum=$(sha256sum "$repo/scripts/registry/requirements.txt" | cut -c1-12)
	python_env=$cache/python-confluent-$sum
	if [ -f "$python_env/installed" ]; then
		return
	fi
	log "installing Confluent's Python client from PyPI into $python_env"
	rm -rf "$python_env"
	python3 -m venv "$python_env" >&2
	"$python_env/bin/pip" install -q --disable-pip-version-check -r "$repo/scripts/registry/requirements.txt" >&2
	touch "$python_env/installed" # the mark of an install that finished
}

# launch_registry starts the registry in the background on a free port;
# wait_registry waits for its API. In between, Kafka starts: the JVMs warm
# up side by side.
launch_registry() {
	pick_registry
	fetch_registry
	fetch_serdes
	fetch_python
	local port mport
	port=$(free_port)
	mport=$(free_port)
	echo "http://127.0.0.1:$port/apis/ccompat/v7" >"$dir/registry.url"
	echo "$registry_version" >"$dir/registry.version"
	date +%s%N >"$dir/registry.started"
	# In-memory storage (the default): the registry forgets its schemas
	# when it stops. A small heap, the client compiler and the serial
	# collector: it starts in seconds and holds about 250 MiB. Quarkus's
	# management interface (health, metrics) would bind 0.0.0.0:9000, which
	# a second registry on the machine could not: loopback, a free port.
	# A class-data archive in the cache (JDK 19+) halves later starts: about
	# 5 s instead of 11 on two busy cores.
	local cds=()
	if [ "$(java_major "$registry_java")" -ge 19 ]; then
		cds=(-XX:+AutoCreateSharedArchive -XX:SharedArchiveFile="$registry_home.jsa")
	fi
	cd "$registry_home"
	nohup "$registry_java" "${cds[@]}" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
		-Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$port" \
		-Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$mport" -Dquarkus.log.level=WARN \
		-jar quarkus-run.jar >>"$dir/registry.log" 2>&1 &
	echo $! >"$dir/registry.pid"
	cd - >/dev/null
}

wait_registry() {
	local url deadline=$((SECONDS + 120))
	url=$(cat "$dir/registry.url")
	until python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1]+"/subjects", timeout=2)' "$url" 2>/dev/null; do
		if ! kill -0 "$(cat "$dir/registry.pid")" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
			log "the schema registry did not start; last lines of $dir/registry.log:"
			tail -20 "$dir/registry.log" >&2
			return 1
		fi
		sleep 0.2
	done
	local ms=$((($(date +%s%N) - $(cat "$dir/registry.started")) / 1000000))
	log "Apicurio Registry $(cat "$dir/registry.version") at $url (pid $(cat "$dir/registry.pid"), ready ${ms} ms after launch)"
}

emulator_bin() {
	# Built from the client module the project uses, at its version, even
	# where gcloud ships one: gcloud's lags the client (its emulator of
	# 2025 ignores a table's timestamp granularity, which the tests read).
	local version bin
	version=$(cd "$repo" && go list -m -f '{{.Version}}' cloud.google.com/go/bigtable)
	bin=$cache/cbtemulator-$version
	if [ ! -x "$bin" ]; then
		log "building the Bigtable emulator from cloud.google.com/go/bigtable/cmd/emulator $version"
		(cd "$repo" && go build -o "$bin" cloud.google.com/go/bigtable/cmd/emulator) >&2
	fi
	echo "$bin"
}

start_kafka() {
	fetch_kafka
	local port cport sport tport mport ssport data tls
	port=$(free_port)
	cport=$(free_port)
	sport=$(free_port)
	tport=$(free_port)
	mport=$(free_port)
	ssport=$(free_port)
	data=$dir/kafka-data
	tls=$dir/tls
	mkdir -p "$data"
	# Certificates made now, never committed: a CA, the broker's, a valid
	# and an expired client certificate, and an unrelated CA.
	(cd "$repo" && go run ./scripts/gencerts -dir "$tls" -client-cn "$sasl_user") >&2
	cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,SASL_PLAINTEXT://127.0.0.1:$sport,SSL://127.0.0.1:$tport,MTLS://127.0.0.1:$mport,SASL_SSL://127.0.0.1:$ssport,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,SASL_PLAINTEXT://127.0.0.1:$sport,SSL://127.0.0.1:$tport,MTLS://127.0.0.1:$mport,SASL_SSL://127.0.0.1:$ssport
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_SSL:SASL_SSL
# A second listener for the secure-Kafka tests: SASL with SCRAM users made
# at format time, and PLAIN.
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN,OAUTHBEARER
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$sasl_user="$sasl_password";
# OAUTHBEARER with Kafka's own validator of unsecured tokens (alg none):
# the exchange is the client's to prove; the token's sub is the principal.
listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="$sasl_user";
# Three TLS listeners with the certificates of scripts/gencerts, in PEM
# (an unencrypted PKCS#8 key: no ssl.key.password): SSL, server
# authentication only; MTLS, which requires a client certificate of the CA;
# SASL_SSL, the same users as SASL_PLAINTEXT over TLS.
ssl.keystore.type=PEM
ssl.keystore.location=$tls/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
listener.name.mtls.ssl.client.auth=required
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$sasl_user="$sasl_password";
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="$sasl_user";
# A client certificate's principal is its CN, which gencerts makes the SASL
# user's name: the mutual-TLS worker has the SASL user's ACLs.
ssl.principal.mapping.rules=RULE:^CN=([^,]+)$/\$1/,DEFAULT
# An authorizer, so that tests can deny the SASL user a topic: the
# principal of the plaintext listeners and of SSL, which asks for no client
# certificate (ANONYMOUS), is a super user, as are the
# broker and the controller themselves; the SASL user gets ACLs below.
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
log.dirs=$data
num.partitions=3
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
# Retention is enforced every second, not every 5 minutes: the dead-letter
# tests watch a letter become unreadable within its tenant's TTL of
# seconds (the worker reads this setting into its bound). From the
# broker's start too: Kafka waits log.initial.task.delay.ms (30 s) before
# its first check, and a test that begins within that of a fresh broker
# (the first of make test-kafka3) saw its letters outlive it.
log.retention.check.interval.ms=1000
log.initial.task.delay.ms=0
PROPS
	local id
	id=$(kjava kafka.tools.StorageTool random-uuid 2>/dev/null)
	echo "$id" >"$dir/cluster.id"
	echo "$cport" >"$dir/controller.port"
	kjava kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" \
		--add-scram "SCRAM-SHA-256=[name=$sasl_user,password=$sasl_password]" \
		--add-scram "SCRAM-SHA-512=[name=$sasl_user,password=$sasl_password]" >"$dir/kafka-format.log" 2>&1
	echo "127.0.0.1:$port" >"$dir/kafka.addr"
	echo "127.0.0.1:$sport" >"$dir/kafka-sasl.addr"
	echo "127.0.0.1:$tport" >"$dir/kafka-tls.addr"
	echo "127.0.0.1:$mport" >"$dir/kafka-mtls.addr"
	echo "127.0.0.1:$ssport" >"$dir/kafka-sasl-ssl.addr"
	run_kafka
	# The SASL user may do anything with topics and groups; tests deny it
	# single topics with ACLs of their own.
	for resource in --topic --group; do
		kjava $kafka_tools.AclCommand --bootstrap-server "127.0.0.1:$port" --add --allow-principal "User:$sasl_user" \
			--operation All "$resource" '*' >>"$dir/kafka-acls.log" 2>&1
	done
	log "ACLs for User:$sasl_user: all on every topic and group"
}

# run_kafka starts the broker on the formatted data directory and waits
# until it answers: also how the fault tests bring a killed broker back.
run_kafka() {
	local addr
	addr=$(cat "$dir/kafka.addr")
	nohup java -Xmx512m -Xms256m "$kafka_log" -cp "$kafka_lib/*" kafka.Kafka "$dir/server.properties" >>"$dir/kafka.log" 2>&1 &
	echo $! >"$dir/kafka.pid"
	# A listening port is not a working broker: wait until it answers
	# Metadata, through Kafka's own admin tool.
	local deadline=$((SECONDS + 90))
	until kjava org.apache.kafka.tools.TopicCommand --bootstrap-server "$addr" --list >/dev/null 2>&1; do
		if ! kill -0 "$(cat "$dir/kafka.pid")" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
			log "Kafka did not start; last lines of $dir/kafka.log:"
			tail -20 "$dir/kafka.log" >&2
			return 1
		fi
		sleep 0.5
	done
	log "Kafka $kafka_version on $addr (pid $(cat "$dir/kafka.pid"))"
}

# A second broker (broker only, node 2) in the same cluster, for the fault
# suite's leader changes; not started by default.
start_kafka2() {
	local port data
	if [ -f "$dir/kafka2.pid" ] && kill -0 "$(cat "$dir/kafka2.pid")" 2>/dev/null; then
		return
	fi
	data=$dir/kafka2-data
	if [ ! -f "$dir/server2.properties" ]; then
		port=$(free_port)
		mkdir -p "$data"
		cat >"$dir/server2.properties" <<PROPS
process.roles=broker
node.id=2
controller.quorum.voters=1@127.0.0.1:$(cat "$dir/controller.port")
listeners=PLAINTEXT://127.0.0.1:$port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
log.dirs=$data
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
log.retention.check.interval.ms=1000
log.initial.task.delay.ms=0
group.initial.rebalance.delay.ms=0
PROPS
		kjava kafka.tools.StorageTool format -t "$(cat "$dir/cluster.id")" -c "$dir/server2.properties" >"$dir/kafka2-format.log" 2>&1
		echo "127.0.0.1:$port" >"$dir/kafka2.addr"
	fi
	nohup java -Xmx384m -Xms128m "$kafka_log" -cp "$kafka_lib/*" kafka.Kafka "$dir/server2.properties" >>"$dir/kafka2.log" 2>&1 &
	echo $! >"$dir/kafka2.pid"
	local deadline=$((SECONDS + 90))
	until kjava org.apache.kafka.tools.TopicCommand --bootstrap-server "$(cat "$dir/kafka2.addr")" --list >/dev/null 2>&1; do
		if ! kill -0 "$(cat "$dir/kafka2.pid")" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
			log "the second Kafka broker did not start; last lines of $dir/kafka2.log:"
			tail -20 "$dir/kafka2.log" >&2
			return 1
		fi
		sleep 0.5
	done
	log "second Kafka broker (node 2) on $(cat "$dir/kafka2.addr") (pid $(cat "$dir/kafka2.pid"))"
}

start_emulator() {
	local bin port
	bin=$(emulator_bin)
	port=$(free_port)
	nohup "$bin" -host 127.0.0.1 -port "$port" >"$dir/emulator.log" 2>&1 &
	echo $! >"$dir/emulator.pid"
	echo "127.0.0.1:$port" >"$dir/emulator.addr"
	wait_tcp 127.0.0.1 "$port" 30 || { log "the Bigtable emulator did not start"; cat "$dir/emulator.log" >&2; return 1; }
	log "Bigtable emulator on 127.0.0.1:$port (pid $(cat "$dir/emulator.pid"))"
}

# fetch_etcd installs Debian's etcd-server when no etcd is on the PATH, as
# scripts/test.sh installs promtool.
fetch_etcd() {
	command -v etcd >/dev/null && return
	log "installing etcd (Debian's etcd-server)"
	local sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get install -y --no-install-recommends etcd-server >/dev/null 2>&1 ||
		{ $sudo apt-get update >/dev/null && $sudo apt-get install -y --no-install-recommends etcd-server >/dev/null; }
}

# fetch_kube builds kube-apiserver and kubectl into the cache, once. The
# build is the costly part of the API server (docs/testing.md has the
# figures): no optimisation, inlining or debug information, which the
# tests do not need and the compiler spends most of its time on; no cgo.
# The version is stamped as Kubernetes' own build does, so that kubectl
# and the server report v$kube_version.
fetch_kube() {
	if [ -x "$kube_home/kube-apiserver" ] && [ -x "$kube_home/kubectl" ]; then
		return
	fi
	log "building kube-apiserver and kubectl $kube_version from the Go module proxy into $kube_home (minutes)"
	local tmp ldflags="-s -w" pkg key
	for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
		for key in "gitVersion=v$kube_version" "gitMajor=${kube_version%%.*}" "gitMinor=$(echo "$kube_version" | cut -d. -f2)" gitTreeState=clean; do
			ldflags="$ldflags -X $pkg.$key"
		done
	done
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/kubernetes-build.XXXXXX")
	# A Go build cache of its own, removed after: its 2 GB of objects
	# built without optimisation serve no other build.
	local start=$SECONDS gocache
	gocache=$(mktemp -d)
	# At the lowest priority: make test builds it beside the suite, which
	# is waiting on services most of the time, and would wait on this
	# build's CPU for minutes at an equal share.
	(cd "$kube_mod" && GOCACHE=$gocache GOFLAGS=-mod=readonly CGO_ENABLED=0 nice -n 19 go build -trimpath -gcflags=all='-N -l -dwarf=false' \
		-ldflags="$ldflags" -o "$tmp/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl) 2>&1 |
		grep -v '^go: downloading' >&2 || true
	rm -rf "$gocache"
	if [ ! -x "$tmp/kube-apiserver" ] || [ ! -x "$tmp/kubectl" ]; then
		rm -rf "$tmp"
		log "the build of kube-apiserver and kubectl failed"
		return 1
	fi
	rm -rf "$kube_home"
	mv "$tmp" "$kube_home"
	log "built kube-apiserver and kubectl in $((SECONDS - start)) s"
}

# start_kube starts etcd and the API server on free loopback ports, with
# the state in $kube_dir, waits until it is ready, installs the CRDs, and
# writes an admin's kubeconfig, with kubectl beside it.
start_kube() {
	fetch_etcd
	fetch_kube
	ln -s "$kube_home/kubectl" "$kube_dir/kubectl"
	local cport pport port token kubectl="$kube_home/kubectl"
	cport=$(free_port)
	pport=$(free_port)
	port=$(free_port)
	nohup etcd --name cellttl --data-dir "$kube_dir/etcd-data" \
		--listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
		--listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
		--initial-cluster "cellttl=http://127.0.0.1:$pport" --log-level warn >"$kube_dir/etcd.log" 2>&1 &
	echo $! >"$kube_dir/etcd.pid"
	wait_http "http://127.0.0.1:$cport/health" etcd 30 || return 1
	# A throwaway admin token on loopback, and the service-account key pair
	# the server signs tokens with (no pod asks for one: no token is
	# mounted in cellttl's pods).
	token=$(openssl rand -hex 16)
	echo "$token,cellttl-admin,cellttl-admin,system:masters" >"$kube_dir/tokens.csv"
	openssl genrsa -out "$kube_dir/sa.key" 2048 2>/dev/null
	openssl rsa -in "$kube_dir/sa.key" -pubout -out "$kube_dir/sa.pub" 2>/dev/null
	nohup "$kube_home/kube-apiserver" --etcd-servers "http://127.0.0.1:$cport" \
		--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port" --cert-dir "$kube_dir/certs" \
		--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$kube_dir/sa.pub" \
		--service-account-signing-key-file "$kube_dir/sa.key" --token-auth-file "$kube_dir/tokens.csv" \
		--authorization-mode RBAC --service-cluster-ip-range 10.96.0.0/16 >"$kube_dir/apiserver.log" 2>&1 &
	echo $! >"$kube_dir/apiserver.pid"
	cat >"$kube_dir/kubeconfig.tmp" <<CONFIG
apiVersion: v1
kind: Config
clusters:
  - name: cellttl
    cluster:
      server: https://127.0.0.1:$port
      certificate-authority: $kube_dir/certs/apiserver.crt
users:
  - name: cellttl-admin
    user:
      token: $token
contexts:
  - name: cellttl
    context: {cluster: cellttl, user: cellttl-admin}
current-context: cellttl
CONFIG
	# Ready is /readyz answering ok: etcd reached, the bootstrap RBAC
	# roles and priority levels made.
	local deadline=$((SECONDS + 120))
	until [ "$(KUBECONFIG=$kube_dir/kubeconfig.tmp "$kubectl" get --raw /readyz 2>/dev/null)" = ok ]; do
		if ! kill -0 "$(cat "$kube_dir/apiserver.pid")" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
			log "kube-apiserver did not become ready; last lines of $kube_dir/apiserver.log:"
			tail -20 "$kube_dir/apiserver.log" >&2
			return 1
		fi
		sleep 0.5
	done
	install_crds "$kube_dir/kubeconfig.tmp"
	# The kubeconfig appears once the server is ready and its CRDs
	# established: a test that waits for it waits for all of that.
	mv "$kube_dir/kubeconfig.tmp" "$kube_dir/kubeconfig"
	log "kube-apiserver $kube_version on https://127.0.0.1:$port (pid $(cat "$kube_dir/apiserver.pid")), etcd on 127.0.0.1:$cport"
}

# install_crds applies the CRDs of kube_crds, from the module cache, and
# waits until the server serves each.
install_crds() { # kubeconfig
	local entry mod dir f files=()
	for entry in "${kube_crds[@]}"; do
		read -r mod f <<<"$entry"
		dir=$(cd "$kube_mod" && GOFLAGS='' go mod download -json "$mod" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
		for f in ${entry#* }; do
			files+=(-f "$dir/$f")
		done
	done
	KUBECONFIG=$1 "$kube_home/kubectl" apply --server-side --field-manager cellttl-services "${files[@]}" >"$kube_dir/crds.log"
	# Not kubectl wait, nor a jsonpath filter: both fail on a CRD whose
	# status has no conditions yet, as a CRD just made may have.
	local deadline=$((SECONDS + 60))
	until KUBECONFIG=$1 "$kube_home/kubectl" get crd -o json 2>/dev/null | python3 -c '
import json, sys
crds = json.load(sys.stdin)["items"]
sys.exit(not all(any(c["type"] == "Established" and c["status"] == "True"
                     for c in (crd.get("status") or {}).get("conditions") or []) for crd in crds))'; do
		if [ $SECONDS -ge $deadline ]; then
			log "CRDs not established after 60 s"
			return 1
		fi
		sleep 0.5
	done
	log "CRDs established: $(KUBECONFIG=$1 "$kube_home/kubectl" get crd -o name | sed 's#.*/##' | tr '\n' ' ')"
}

wait_http() { # url name seconds
	local deadline=$((SECONDS + $3))
	until curl -fsS -o /dev/null "$1" 2>/dev/null; do
		if [ $SECONDS -ge $deadline ]; then
			log "$2 did not answer $1; last lines of its log:"
			tail -20 "$kube_dir/$2.log" >&2
			return 1
		fi
		sleep 0.2
	done
}

print_kube_env() {
	# KUBECONFIG for kubectl by hand ($TESTENV_KUBE_DIR/kubectl is the
	# server's version); the tests read TESTENV_KUBE_DIR alone, so that a
	# KUBECONFIG of a real cluster is never theirs.
	echo "export KUBECONFIG='$kube_dir/kubeconfig'"
	echo "export TESTENV_KUBE_DIR='$kube_dir'"
}

# stop_kube stops the API server and etcd and removes their state: the
# next start begins with an empty cluster. The logs stay, to read.
stop_kube() {
	stop_one kube/apiserver
	stop_one kube/etcd
	[ -d "$kube_dir" ] || return 0
	find "$kube_dir" -mindepth 1 -maxdepth 1 ! -name '*.log' -exec rm -rf {} +
}

print_env() {
	# KAFKA_BROKERS for the tests, CELLTTL_BROKERS for the worker's and
	# loadtest's --brokers.
	echo "export KAFKA_BROKERS=$(cat "$dir/kafka.addr")"
	echo "export CELLTTL_BROKERS=$(cat "$dir/kafka.addr")"
	echo "export BIGTABLE_EMULATOR_HOST=$(cat "$dir/emulator.addr")"
	echo "export TESTENV_KAFKA_LIB='$kafka_lib'"
	echo "export TESTENV_KAFKA_VERSION=$kafka_version"
	# Not CELLTTL_*: those configure the worker itself.
	echo "export TESTENV_SASL_BROKERS=$(cat "$dir/kafka-sasl.addr")"
	echo "export TESTENV_SASL_USERNAME=$sasl_user"
	echo "export TESTENV_SASL_PASSWORD=$sasl_password"
	# The TLS listeners, and the PEM files of scripts/gencerts: ca.pem,
	# client.pem and client-key.pem, client-expired.pem and
	# client-expired-key.pem, wrong-ca.pem.
	echo "export TESTENV_TLS_BROKERS=$(cat "$dir/kafka-tls.addr")"
	echo "export TESTENV_MTLS_BROKERS=$(cat "$dir/kafka-mtls.addr")"
	echo "export TESTENV_SASL_SSL_BROKERS=$(cat "$dir/kafka-sasl-ssl.addr")"
	echo "export TESTENV_TLS_DIR='$dir/tls'"
	echo "export TESTENV_SERVICES_DIR='$dir'"
	# The registry's Confluent-compatible API, and the classpath of
	# Apicurio's Java serializers for the tests' independent producers.
	if [ -f "$dir/registry.url" ]; then
		echo "export TESTENV_SCHEMA_REGISTRY_URL=$(cat "$dir/registry.url")"
		echo "export TESTENV_SERDES_LIB='$serdes_lib'"
		echo "export TESTENV_CONFLUENT_PYTHON='$python_env/bin/python'"
	fi
}

stop_one() { # name
	local pidf=$dir/$1.pid
	[ -f "$pidf" ] || return 0
	local pid
	pid=$(cat "$pidf")
	if kill "$pid" 2>/dev/null; then
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$pidf"
}

case "${1:-}" in
start)
	# --no-registry: Kafka and the emulator alone (the fault suite's own
	# services need no schema registry).
	registry=yes
	[ "${2:-}" = --no-registry ] && registry=no
	"$0" stop
	rm -rf "$dir"
	mkdir -p "$dir"
	start_emulator
	if [ $registry = yes ]; then launch_registry; fi
	start_kafka
	if [ $registry = yes ]; then wait_registry; fi
	print_env | tee "$dir/env"
	;;
stop)
	stop_kube
	stop_one registry
	stop_one kafka2
	stop_one kafka
	stop_one emulator
	# The brokers' logs are half a gigabyte after the fault suite, and the
	# next start begins afresh: the process logs stay, to read.
	rm -rf "$dir/kafka-data" "$dir/kafka2-data"
	;;
kube-start)
	# The API server alone, beside the other services or after them
	# (start clears the services' directory): its first build takes
	# minutes, which the services that do not need it do not wait for.
	# A test waiting for it reads $kube_dir: starting.pid while this
	# runs, then kubeconfig, or failed with the end of this output.
	stop_kube
	mkdir -p "$kube_dir"
	rm -f "$kube_dir"/*.log
	echo $$ >"$kube_dir/starting.pid"
	exec 2> >(tee -a "$kube_dir/start.log" >&2)
	trap '[ -f "$kube_dir/kubeconfig" ] || tail -20 "$kube_dir/start.log" >"$kube_dir/failed"' EXIT
	start_kube
	print_kube_env | tee "$kube_dir/env"
	;;
kube-stop)
	stop_kube
	;;
kafka2-start)
	start_kafka2
	;;
kafka2-kill)
	kill -9 "$(cat "$dir/kafka2.pid")" 2>/dev/null || true
	rm -f "$dir/kafka2.pid"
	;;
kafka2-stop)
	stop_one kafka2
	;;
elect-preferred)
	# Move every partition's leadership back to its preferred replica.
	kjava org.apache.kafka.tools.LeaderElectionCommand --bootstrap-server "$(cat "$dir/kafka.addr")" \
		--election-type preferred --all-topic-partitions >&2 || true
	;;
env)
	cat "$dir/env"
	;;
kafka-kill)
	# SIGKILL, as a crash: no controlled shutdown.
	kill -9 "$(cat "$dir/kafka.pid")" 2>/dev/null || true
	rm -f "$dir/kafka.pid"
	;;
kafka-start)
	run_kafka
	;;
java-home)
	# The JDK the registry runs on, for .ci/run's JAVA_HOME: >= 21 when
	# installed, else nothing (the default java).
	newest_jdk 21
	;;
*)
	echo "usage: $0 start [--no-registry]|stop|env|kube-start|kube-stop|kafka-kill|kafka-start|kafka2-start|kafka2-kill|kafka2-stop|elect-preferred|java-home" >&2
	exit 2
	;;
esac
