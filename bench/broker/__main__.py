from bench.broker.cli import main

main()
