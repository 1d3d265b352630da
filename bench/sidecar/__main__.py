from bench.sidecar.cli import main

main()
