from k3deploy.cli.app import main

main()
