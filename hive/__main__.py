from hive.cli import main

main()
