#!/usr/bin/env bash
# Regenerates the test CA and the loopback server certificate (valid 100 years) that
# tests/client/test_client_tls.py serves. Not run by the tests: the PEM files are committed.
set -euo pipefail
cd "$(dirname "$0")"
openssl req -x509 -newkey rsa:2048 -nodes -days 36500 -subj "/CN=pytest-laya test CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout ca.key -out ca.pem
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout server.key -out server.csr
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 36500 \
    -extfile server.ext -out server.pem
rm -f server.csr server.ext ca.srl ca.key
